//! Step 3, persist: connecting and migrating.
//!
//! Opening a pool for either backend, and the embedded migrations.
//!
//! The `Any` driver takes nothing but a URL, so SQLite's settings travel in
//! the URL (`mode=rwc` creates the file) or are applied once after
//! connecting (WAL is a property of the file and sticks).

use super::{Backend, Result, StoreError, StoreOptions};
use sqlx::any::AnyPoolOptions;
use sqlx::migrate::Migrator;
use sqlx::AnyPool;

/// Each backend's migrations, embedded in the binary so a deployed proxy
/// needs no migrations folder; every file in the folder is included.
static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("migrations/postgres");
static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("migrations/sqlite");

/// Picks the backend from the URL scheme.
pub(super) fn backend_of(url: &str) -> Result<Backend> {
    let scheme = url.split_once(':').map_or(url, |(scheme, _)| scheme);
    match scheme {
        "postgres" | "postgresql" => Ok(Backend::Postgres),
        "sqlite" => Ok(Backend::Sqlite),
        other => Err(StoreError::UnsupportedUrl(other.to_owned())),
    }
}

/// An in-memory SQLite database lives as long as its one connection.
fn is_sqlite_memory(url: &str) -> bool {
    url.contains(":memory:") || url.contains("mode=memory")
}

/// Adds `mode=rwc` to a SQLite file URL that sets no mode, so any
/// `sqlite://` URL creates its file when missing, as ARCHITECTURE.md promises.
pub(super) fn sqlite_url(url: &str) -> String {
    if is_sqlite_memory(url) || url.contains("mode=") {
        return url.to_owned();
    }
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}mode=rwc")
}

/// The file path of a SQLite file URL (`sqlite://state/c.db?x=y` →
/// `state/c.db`); `None` for in-memory databases.
fn sqlite_path(url: &str) -> Option<&str> {
    if is_sqlite_memory(url) {
        return None;
    }
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or(rest);
    (!path.is_empty()).then_some(path)
}

/// Creates the directory an SQLite file will live in, as SQLite itself
/// creates only the file.
fn create_sqlite_directory(url: &str) -> Result<()> {
    let Some(path) = sqlite_path(url) else {
        return Ok(());
    };
    match std::path::Path::new(path).parent() {
        Some(parent) if !parent.as_os_str().is_empty() => {
            std::fs::create_dir_all(parent).map_err(|source| StoreError::SqliteDirectory {
                path: path.to_owned(),
                source,
            })
        }
        _ => Ok(()),
    }
}

/// Opens the pool and checks that the database answers.
pub(super) async fn open(url: &str, options: &StoreOptions) -> Result<(AnyPool, Backend)> {
    if backend_of(url)? == Backend::Sqlite {
        create_sqlite_directory(url)?;
    }
    let (pool_options, url, backend) = prepare(url, options)?;
    Ok((pool_options.connect(&url).await?, backend))
}

/// Builds the pool without connecting: the first query connects. Lets the
/// proxy start, degraded, while the database is down.
pub(super) fn open_lazy(url: &str, options: &StoreOptions) -> Result<(AnyPool, Backend)> {
    let (pool_options, url, backend) = prepare(url, options)?;
    Ok((pool_options.connect_lazy(&url)?, backend))
}

/// Pool settings and the URL to hand to the `Any` driver.
fn prepare(url: &str, options: &StoreOptions) -> Result<(AnyPoolOptions, String, Backend)> {
    sqlx::any::install_default_drivers();
    let backend = backend_of(url)?;
    let pool_options = AnyPoolOptions::new()
        .max_connections(options.max_connections)
        .acquire_timeout(options.acquire_timeout);
    let prepared = match backend {
        Backend::Postgres => (pool_options, url.to_owned()),
        // Each new connection would open a different empty database, so keep
        // exactly one and never let it go idle.
        Backend::Sqlite if is_sqlite_memory(url) => (
            pool_options
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None),
            url.to_owned(),
        ),
        // WAL lets readers and the writer proceed together; it is a property
        // of the file, so only the first connection ever changes anything.
        // sqlx already gives every SQLite connection a 5 s busy timeout, so
        // concurrent writers queue rather than fail. Temporary b-trees (a
        // batch statement's sort, a conflict check) stay in memory: on
        // file, SQLite created and removed one under /var/tmp for every
        // few batches.
        Backend::Sqlite => {
            let pool_options = pool_options.after_connect(|connection, _| {
                Box::pin(async move {
                    sqlx::query("pragma journal_mode = wal")
                        .execute(&mut *connection)
                        .await?;
                    sqlx::query("pragma temp_store = memory")
                        .execute(connection)
                        .await?;
                    Ok(())
                })
            });
            (pool_options, sqlite_url(url))
        }
    };
    Ok((prepared.0, prepared.1, backend))
}

/// Runs the embedded migrations of `backend`. sqlx implements `Migrate` for
/// `AnyConnection` by delegating to the real driver, which on Postgres also
/// takes an advisory lock, so instances starting together migrate once.
pub(super) async fn migrate(pool: &AnyPool, backend: Backend) -> Result<()> {
    let migrator = match backend {
        Backend::Postgres => &POSTGRES_MIGRATIONS,
        Backend::Sqlite => &SQLITE_MIGRATIONS,
    };
    migrator.run(pool).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheme_picks_the_backend() {
        assert_eq!(
            backend_of("postgres://u@h/db").ok(),
            Some(Backend::Postgres)
        );
        assert_eq!(
            backend_of("postgresql://h/db").ok(),
            Some(Backend::Postgres)
        );
        assert_eq!(backend_of("sqlite::memory:").ok(), Some(Backend::Sqlite));
        assert_eq!(
            backend_of("sqlite://condenser.db").ok(),
            Some(Backend::Sqlite)
        );
    }

    #[test]
    fn an_unsupported_scheme_is_reported_without_the_rest_of_the_url() {
        let error = backend_of("mysql://root:secret@h/db").err();
        assert!(matches!(error, Some(StoreError::UnsupportedUrl(s)) if s == "mysql"));
    }

    #[test]
    fn sqlite_file_urls_create_their_file() {
        assert_eq!(sqlite_url("sqlite://c.db"), "sqlite://c.db?mode=rwc");
        assert_eq!(
            sqlite_url("sqlite:///abs/c.db?cache=shared"),
            "sqlite:///abs/c.db?cache=shared&mode=rwc"
        );
        assert_eq!(sqlite_url("sqlite://c.db?mode=ro"), "sqlite://c.db?mode=ro");
        assert_eq!(sqlite_url("sqlite::memory:"), "sqlite::memory:");
    }

    #[test]
    fn the_file_path_is_read_from_either_sqlite_url_form() {
        assert_eq!(
            sqlite_path("sqlite://state/c.db?mode=rwc"),
            Some("state/c.db")
        );
        assert_eq!(sqlite_path("sqlite:///data/c.db"), Some("/data/c.db"));
        assert_eq!(sqlite_path("sqlite:c.db"), Some("c.db"));
        assert_eq!(sqlite_path("sqlite::memory:"), None);
    }
}
