-- 0020: search attributes (issue 28 item 1; libs/query/src/lib.rs designs the table,
-- libs/store/src/search.rs fills it, docs/queries.md). One row per attribute value of an
-- execution (a `keyword_list` has one row per element), replaced by the owner's commit in
-- the same transaction as the `SearchAttributesUpserted` events it projects, deleted with
-- the execution. Datetimes are epoch milliseconds, as every time column. A commit without
-- upserts never touches the table.
CREATE TABLE execution_search (
    execution_id TEXT NOT NULL,
    name TEXT NOT NULL,
    kw TEXT,
    ival BIGINT,
    num DOUBLE PRECISION,
    ts BIGINT,
    flag BOOLEAN
);
CREATE INDEX execution_search_kw ON execution_search (name, kw, execution_id);
CREATE INDEX execution_search_ival ON execution_search (name, ival, execution_id);
CREATE INDEX execution_search_num ON execution_search (name, num, execution_id);
CREATE INDEX execution_search_ts ON execution_search (name, ts, execution_id);
CREATE INDEX execution_search_id ON execution_search (execution_id, name);

-- The server-wide catalog: every attribute some registered definition declares, with its
-- type and the first workflow that declared it. A name keeps one type across workflows
-- (registration refuses another with SEARCH_ATTRIBUTE_CONFLICT); ListExecutions reads
-- this small table to check a query's search attributes.
CREATE TABLE search_attributes (
    name TEXT PRIMARY KEY,
    attr_type TEXT NOT NULL,
    workflow TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
