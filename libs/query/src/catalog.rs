//! The attributes a query may name: the system attributes of the executions table, each
//! mapped to its real column, and the search attributes a caller declares with a type.
//! There is no `task_queue`: Orbit routes each step's task by its task name (and labels),
//! not by a queue per execution, so no column holds one and naming it is refused as
//! unknown (docs/queries.md).

use std::collections::BTreeMap;

/// The type of a declared search attribute (issue 28 item 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SearchType {
    /// An exact string (ids, names, codes).
    Keyword,
    /// Free text; compared as a whole string in this version.
    Text,
    /// A 64-bit integer.
    Int,
    /// A double.
    Double,
    /// A boolean.
    Bool,
    /// A point in time (epoch milliseconds in the store).
    Datetime,
    /// Several keywords; a predicate holds when it holds for one element.
    KeywordList,
}

impl SearchType {
    /// Parses the declared type name (`keyword`, `text`, `int`, `double`, `bool`,
    /// `datetime`, `keyword_list`).
    #[must_use]
    pub fn parse(name: &str) -> Option<SearchType> {
        Some(match name {
            "keyword" => SearchType::Keyword,
            "text" => SearchType::Text,
            "int" => SearchType::Int,
            "double" => SearchType::Double,
            "bool" => SearchType::Bool,
            "datetime" => SearchType::Datetime,
            "keyword_list" => SearchType::KeywordList,
            _ => return None,
        })
    }

    /// The declared type name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            SearchType::Keyword => "keyword",
            SearchType::Text => "text",
            SearchType::Int => "int",
            SearchType::Double => "double",
            SearchType::Bool => "bool",
            SearchType::Datetime => "datetime",
            SearchType::KeywordList => "keyword_list",
        }
    }
}

/// The value type of an attribute, which decides the operators and literals it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrType {
    /// A declared search attribute's type.
    Search(SearchType),
    /// An execution status name (`STATUS_NAMES`), compared case-insensitively.
    Status,
    /// A duration in milliseconds (`5000`, `'5s'`, `'1h30m'`).
    Duration,
}

impl AttrType {
    /// The type's name in error messages.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            AttrType::Search(t) => t.as_str(),
            AttrType::Status => "status",
            AttrType::Duration => "duration",
        }
    }
}

/// The execution statuses as stored (`orbit_engine::Status::as_str`; the store's tests
/// check the two lists agree).
pub const STATUS_NAMES: &[&str] = &[
    "PENDING",
    "RUNNING",
    "COMPENSATING",
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMED_OUT",
    "CONTINUED_AS_NEW",
    "SUSPENDED",
];

/// A system attribute: a column (or expression) of the `executions` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SystemAttr {
    /// The name in queries.
    pub name: &'static str,
    /// The SQL expression on `executions`.
    pub column: &'static str,
    /// Its type.
    pub ty: AttrType,
    /// Whether the column can be NULL.
    pub nullable: bool,
}

const fn sys(name: &'static str, column: &'static str, ty: AttrType, nullable: bool) -> SystemAttr {
    SystemAttr { name, column, ty, nullable }
}

const KEYWORD: AttrType = AttrType::Search(SearchType::Keyword);
const DATETIME: AttrType = AttrType::Search(SearchType::Datetime);

/// Every system attribute.
pub const SYSTEM_ATTRIBUTES: &[SystemAttr] = &[
    sys("execution_id", "execution_id", KEYWORD, false),
    sys("workflow", "workflow", KEYWORD, false),
    sys("version", "version", KEYWORD, false),
    sys("status", "status", AttrType::Status, false),
    sys("created", "created_at", DATETIME, false),
    sys("updated", "updated_at", DATETIME, false),
    sys("closed", "closed_at", DATETIME, true),
    sys("duration", "(closed_at - created_at)", AttrType::Duration, true),
    sys("schedule", "schedule_id", KEYWORD, true),
    sys("parent", "parent_id", KEYWORD, true),
    sys("root", "root_id", KEYWORD, false),
    sys("failed_step", "failed_step", KEYWORD, true),
    sys("error_code", "error_code", KEYWORD, true),
];

/// The attributes one query may name: the system ones and the caller's declared search
/// attributes. A declared name that is also a system name is shadowed by the system one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalog {
    search: BTreeMap<String, SearchType>,
}

/// What a name resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolved<'c> {
    /// A system attribute.
    System(&'static SystemAttr),
    /// A declared search attribute.
    Search(&'c str, SearchType),
}

impl Catalog {
    /// The system attributes only.
    #[must_use]
    pub fn system() -> Self {
        Catalog::default()
    }

    /// The system attributes and these declared search attributes.
    #[must_use]
    pub fn with_search<I, S>(search: I) -> Self
    where
        I: IntoIterator<Item = (S, SearchType)>,
        S: Into<String>,
    {
        Catalog { search: search.into_iter().map(|(n, t)| (n.into(), t)).collect() }
    }

    /// Resolves a name; `None` when unknown.
    #[must_use]
    pub fn resolve(&self, name: &str) -> Option<Resolved<'_>> {
        if let Some(attr) = SYSTEM_ATTRIBUTES.iter().find(|a| a.name == name) {
            return Some(Resolved::System(attr));
        }
        self.search.get_key_value(name).map(|(n, t)| Resolved::Search(n.as_str(), *t))
    }

    /// Every name, for completion and for the "unknown attribute" message.
    #[must_use]
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = SYSTEM_ATTRIBUTES.iter().map(|a| a.name).collect();
        names.extend(self.search.keys().map(String::as_str));
        names
    }
}
