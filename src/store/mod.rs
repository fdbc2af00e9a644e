//! Step 3, persist: the store shared by every stage and every instance.
//!
//! One implementation serves both backends through sqlx's `Any` driver: the
//! SQL is written once, in the dialect Postgres and SQLite share (`$n`
//! placeholders, `on conflict`, recursive CTEs), and the schema keeps to the
//! types `Any` maps on both (bigint unix milliseconds, hex text hashes, JSON as
//! text). `Backend` covers the few bits that differ: the migration folder,
//! SQLite's connection settings, and the clock a lease is measured by.
//!
//! Every query is scoped to one tenant (ARCHITECTURE.md invariant 8), and every
//! write is either idempotent or a single statement, so a crash or a second
//! instance never leaves a half-written row (invariant 7). Messages are
//! shared by content; what is listed, kept and deleted is a conversation,
//! the messages its heads reach (`heads`).

mod connect;
mod coordination;
mod degradable;
mod read;
mod rows;
mod write;

pub use coordination::{notify, StoreMemory};
pub use degradable::Storage;
pub use read::{
    Branch, ConversationDetail, ConversationSummary, DetailQuery, Figures, LearnedWindow,
    ListQuery, Listed, MessageNode, MessageText, Overview, RequestPoint, SortBy, MAX_PAGE,
};
pub use rows::now_ms;
pub use write::{
    prune, Backlog, ConversationRow, Deleted, MessageBatch, MessageWrite, NewMessage, QueueFull,
    RequestRecord, RowsFrom, StoredSize, Writer, PRUNE_EVERY, REQUESTS_KEPT,
};

use sqlx::AnyPool;
use std::time::Duration;

/// Which database a [`Store`] talks to, read from the URL scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `postgres://` or `postgresql://`: production, shared by instances.
    Postgres,
    /// `sqlite://…`: the zero-setup single-instance default.
    Sqlite,
}

/// Everything that can go wrong in the store. The pipeline treats any of
/// these as "run degraded": forward without storing or compacting.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL is neither Postgres nor SQLite; holds only the scheme, never
    /// the URL, which may carry a password.
    #[error("unsupported database url scheme: {0}")]
    UnsupportedUrl(String),
    /// The directory for an SQLite file could not be created.
    #[error("cannot create the directory for the SQLite file {path}: {source}")]
    SqliteDirectory {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A conversation id given to the admin CLI is not a hex prefix of at
    /// least six characters.
    #[error("conversation id must be at least 6 hex characters: {0:?}")]
    InvalidId(String),
    /// A conversation id prefix matches more than one conversation.
    #[error("conversation id {0:?} is ambiguous: give more characters")]
    AmbiguousId(String),
    /// A message write extends a message the store no longer has (deleted
    /// since the writer looked it up): storing it would leave a gap. The
    /// database is fine; the write is refused.
    #[error("a message write extends a message that is no longer stored")]
    ParentMissing,
}

impl StoreError {
    /// Whether the error says the database cannot be reached at all, as
    /// opposed to one statement failing.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            Self::Database(
                sqlx::Error::Io(_)
                    | sqlx::Error::Tls(_)
                    | sqlx::Error::PoolTimedOut
                    | sqlx::Error::PoolClosed
                    | sqlx::Error::WorkerCrashed
            )
        )
    }
}

/// Store results default to [`StoreError`].
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Connection pool settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// Upper bound on open connections (SQLite in-memory databases use one).
    pub max_connections: u32,
    /// How long a query waits for a connection, including opening one. Short
    /// by default so a dead database fails fast and the proxy degrades
    /// instead of stalling every request.
    pub acquire_timeout: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            max_connections: 10,
            acquire_timeout: Duration::from_secs(3),
        }
    }
}

/// A connection pool plus the backend it talks to. Cheap to clone: clones
/// share the pool.
#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
}

impl Store {
    /// Opens a pool for `url` (`postgres://`, `postgresql://`, `sqlite://`,
    /// `sqlite::memory:`), connecting once so a wrong URL fails here. A SQLite
    /// file is created when missing and switched to WAL. Does not migrate.
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Store> {
        let (pool, backend) = connect::open(url, options).await?;
        Ok(Store { pool, backend })
    }

    /// Like [`Store::connect`] without connecting: the first query opens the
    /// first connection. For starting degraded while the database is down.
    pub fn connect_lazy(url: &str, options: &StoreOptions) -> Result<Store> {
        let (pool, backend) = connect::open_lazy(url, options)?;
        Ok(Store { pool, backend })
    }

    /// Applies the embedded migrations of this backend; already applied ones
    /// are skipped, so running it at every start is safe.
    pub async fn migrate(&self) -> Result<()> {
        connect::migrate(&self.pool, self.backend).await
    }

    /// The backend behind this store.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Round trip to the database, for readiness checks.
    pub async fn ping(&self) -> Result<()> {
        sqlx::query("select 1").execute(&self.pool).await?;
        Ok(())
    }
}
