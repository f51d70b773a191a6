//! `orbit token new`: a fresh bearer token and the identities-file entry that admits it.
//!
//! The token is printed once and never stored; the entry holds only its SHA-256, so the
//! identities file can be read, versioned and shared without revealing any credential.
//! Nothing is sent to a server.

use clap::{Args, Subcommand, ValueEnum};
use orbit_auth::token::{hash_token_hex, new_token};

use super::error::Failure;
use super::output::{print_text, Format};

/// `orbit token ...`.
#[derive(Args, Debug)]
pub struct TokenArgs {
    #[command(subcommand)]
    command: TokenCommand,
    /// How to print: `human` (the token, then the entry) or `json` (one document with
    /// `name`, `kind`, `token`, `token_sha256` and `entry`).
    #[arg(long, global = true, value_enum, default_value_t = Format::Human, value_name = "FORMAT")]
    pub output: Format,
}

#[derive(Subcommand, Debug)]
enum TokenCommand {
    /// Print a fresh random 256-bit token (shown once) and its identities-file entry.
    #[command(after_long_help = long_help!(
        "orbit token new billing-app --kind client",
        "orbit token new billing-workers --kind worker --output json",
    ))]
    New {
        /// The identity's name (letters, digits, `.`, `_`, `-`), unique in the file.
        name: String,
        /// What the identity may do; edit `actions`, `workflows` or `tasks` in the entry to
        /// narrow it.
        #[arg(long, value_enum, default_value_t = TokenKind::Client)]
        kind: TokenKind,
    },
}

/// The kind of identity a new token is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum TokenKind {
    Client,
    Worker,
    Admin,
    Service,
}

impl TokenKind {
    fn as_str(self) -> &'static str {
        match self {
            TokenKind::Client => "client",
            TokenKind::Worker => "worker",
            TokenKind::Admin => "admin",
            TokenKind::Service => "service",
        }
    }

    /// The kind-specific lines of the entry: a least-surprise starting point to edit.
    fn rights(self) -> &'static str {
        match self {
            TokenKind::Client => "    actions: [read]        # start, signal, query, cancel, update, read, register, admin\n    workflows: [\"*\"]       # workflow-name patterns, e.g. \"billing.*\"\n",
            TokenKind::Worker => "    tasks: [\"*\"]           # task-name patterns this worker may claim, e.g. \"billing.*\"\n",
            TokenKind::Admin | TokenKind::Service => "",
        }
    }
}

/// The identities-file entry (one YAML list item under `identities:`).
fn entry(name: &str, kind: TokenKind, hash: &str) -> String {
    format!(
        "  - name: {name}\n    kind: {}\n    token_sha256: {hash}\n{}",
        kind.as_str(),
        kind.rights()
    )
}

/// Runs `orbit token ...`.
///
/// # Errors
/// [`Failure::Usage`] for a name that is not a plain identifier or when the system's random
/// source fails.
pub fn run(args: &TokenArgs) -> Result<(), Failure> {
    let TokenCommand::New { name, kind } = &args.command;
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || !name.chars().all(plain) {
        let message = format!("name {name:?} must be letters, digits, `.`, `_` or `-`");
        return Err(Failure::Usage(message));
    }
    let token = new_token().map_err(|e| Failure::Usage(format!("no random source: {e}")))?;
    let hash = hash_token_hex(&token);
    let entry = entry(name, *kind, &hash);
    match args.output {
        Format::Human => print_text(&format!(
            "token: {token}\n\nThe token is shown only now: give it to the caller (--token or \
             ORBIT_TOKEN).\nAdd this entry under `identities:` in the identities file (it holds \
             only the token's SHA-256):\n\n{entry}"
        )),
        Format::Json => {
            let document = serde_json::json!({
                "name": name,
                "kind": kind.as_str(),
                "token": token,
                "token_sha256": hash,
                "entry": entry,
            });
            print_text(&format!("{document}\n"));
        }
    }
    Ok(())
}
