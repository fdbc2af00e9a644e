//! Real databases for tests: a fresh SQLite file or a fresh Postgres database
//! per test, so tests never see each other's rows and run in parallel.
//!
//! Postgres is required: when it cannot be reached the test panics with a
//! message saying how to start it, rather than silently testing one backend.

use condenser::store::{Store, StoreOptions};
use sqlx::postgres::PgConnection;
use sqlx::{AnyPool, Connection, Executor};
use std::time::Duration;
use tempfile::TempDir;

/// Admin connection used to create and drop per-test databases.
const DEFAULT_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Which backend a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestBackend {
    Sqlite,
    Postgres,
}

/// A database that exists for the life of one test.
pub struct TestDb {
    pub url: String,
    /// Keeps the SQLite file's directory alive; removed on drop.
    _dir: Option<TempDir>,
    /// `(admin url, database name)` to drop a Postgres database on drop.
    postgres: Option<(String, String)>,
}

impl TestDb {
    pub async fn new(backend: TestBackend) -> TestDb {
        match backend {
            TestBackend::Sqlite => {
                let dir = tempfile::tempdir().expect("creating a temporary directory");
                let path = dir.path().join("condenser.db");
                let url = format!("sqlite://{}", path.display());
                TestDb {
                    url,
                    _dir: Some(dir),
                    postgres: None,
                }
            }
            TestBackend::Postgres => Self::new_postgres().await,
        }
    }

    async fn new_postgres() -> TestDb {
        let admin_url =
            std::env::var("TEST_DATABASE_URL").unwrap_or_else(|_| DEFAULT_ADMIN_URL.to_owned());
        let connecting =
            tokio::time::timeout(Duration::from_secs(5), PgConnection::connect(&admin_url));
        let mut admin = match connecting.await {
            Ok(Ok(connection)) => connection,
            Ok(Err(error)) => panic!("{POSTGRES_REQUIRED} ({error})"),
            Err(_) => panic!("{POSTGRES_REQUIRED} (timed out connecting)"),
        };
        let name = format!("condenser_test_{}", uuid::Uuid::new_v4().simple());
        admin
            .execute(format!(r#"create database "{name}""#).as_str())
            .await
            .expect("creating the test database");
        admin.close().await.ok();
        let url = with_database(&admin_url, &name);
        TestDb {
            url,
            _dir: None,
            postgres: Some((admin_url, name)),
        }
    }

    /// A store on this database, connected and migrated.
    pub async fn store(&self) -> Store {
        let store = Store::connect(&self.url, &StoreOptions::default())
            .await
            .expect("connecting the store");
        store.migrate().await.expect("migrating the store");
        store
    }

    /// A plain pool on this database, for assertions the store API does not
    /// offer (counting rows).
    pub async fn pool(&self) -> AnyPool {
        sqlx::any::install_default_drivers();
        AnyPool::connect(&self.url)
            .await
            .expect("connecting to the test database")
    }

    /// Everything the database holds on disk, as text: the SQLite files
    /// (WAL included) or a `pg_dump`, to search for what must not be there.
    pub async fn dump(&self) -> String {
        match &self._dir {
            Some(dir) => std::fs::read_dir(dir.path())
                .expect("listing the database directory")
                .filter_map(|entry| std::fs::read(entry.ok()?.path()).ok())
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
                .collect(),
            None => {
                let output = std::process::Command::new("pg_dump")
                    .args(["--data-only", &self.url])
                    .output()
                    .expect("pg_dump runs (install postgresql-client)");
                assert!(
                    output.status.success(),
                    "pg_dump: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
                String::from_utf8_lossy(&output.stdout).into_owned()
            }
        }
    }

    /// The single number `sql` selects.
    pub async fn count(&self, sql: &str) -> i64 {
        let pool = self.pool().await;
        let count = sqlx::query_scalar(sql)
            .fetch_one(&pool)
            .await
            .expect("counting rows");
        pool.close().await;
        count
    }
}

const POSTGRES_REQUIRED: &str =
    "Postgres is required for the test suite: start it or set TEST_DATABASE_URL";

/// `admin_url` with its database name replaced by `name`.
fn with_database(admin_url: &str, name: &str) -> String {
    let (base, query) = admin_url
        .split_once('?')
        .map_or((admin_url, None), |(b, q)| (b, Some(q)));
    let authority_start = base.find("://").map_or(0, |index| index + 3);
    let base = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{base}/{name}?{query}"),
        None => format!("{base}/{name}"),
    }
}

impl Drop for TestDb {
    /// Best effort: drops the Postgres database from a thread of its own,
    /// since `Drop` cannot await and the test's runtime may be shutting down.
    /// `with (force)` ends connections the test's pools still hold.
    fn drop(&mut self) {
        let Some((admin_url, name)) = self.postgres.take() else {
            return;
        };
        let dropping = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                let mut admin = PgConnection::connect(&admin_url).await.ok()?;
                let sql = format!(r#"drop database if exists "{name}" with (force)"#);
                admin.execute(sql.as_str()).await.ok()?;
                admin.close().await.ok()
            })
        });
        let _ = dropping.join();
    }
}

/// Runs each named `async fn(TestBackend)` as two tests, `sqlite::name` and
/// `postgres::name`, so every behaviour is written once and checked on both.
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name($crate::helpers::db::TestBackend::Sqlite).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name($crate::helpers::db::TestBackend::Postgres).await;
                }
            )*
        }
    };
}
pub(crate) use both_backends;

/// Holds the database's write lock on messages until dropped (rolled
/// back): the proxy's writer waits, and what it queues meanwhile stays
/// queued.
pub async fn block_writes(
    pool: &AnyPool,
    backend: TestBackend,
) -> sqlx::Transaction<'static, sqlx::Any> {
    let mut tx = pool.begin().await.expect("transaction");
    let statement = match backend {
        TestBackend::Postgres => "lock table messages in exclusive mode",
        // Any write takes SQLite's single write lock for the transaction.
        TestBackend::Sqlite => "delete from leases where tenant = 'none'",
    };
    sqlx::query(statement)
        .execute(&mut *tx)
        .await
        .expect("lock");
    tx
}

/// Waits until the proxy's writer waits on the lock [`block_writes`]
/// holds, so what it writes next is stuck mid-write, not merely queued.
/// Postgres shows the waiting lock; SQLite's writer waits in its busy
/// handler, which shows nowhere, so there this returns at once: tests that
/// use it must hold whether the writes are still queued or already waiting.
pub async fn wait_for_blocked_writer(pool: &AnyPool, backend: TestBackend) {
    if backend == TestBackend::Sqlite {
        return;
    }
    let waiting = "select count(*) from pg_locks l join pg_class c on l.relation = c.oid \
         where c.relname = 'messages' and not l.granted \
         and l.database = (select oid from pg_database where datname = current_database())";
    super::wait::wait_until(
        super::wait::PATIENCE,
        "the writer waiting on the lock",
        || async {
            sqlx::query_scalar::<_, i64>(waiting)
                .fetch_one(pool)
                .await
                .expect("pg_locks")
                > 0
        },
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn the_database_name_replaces_the_admin_one() {
        let url = with_database("postgres://postgres@127.0.0.1:5432/postgres", "t1");
        assert_eq!(url, "postgres://postgres@127.0.0.1:5432/t1");
        assert_eq!(
            with_database("postgres://h:5432?sslmode=disable", "t1"),
            "postgres://h:5432/t1?sslmode=disable"
        );
    }
}
