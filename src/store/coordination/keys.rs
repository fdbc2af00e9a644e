//! Step 3, persist: keys shared between instances.
//!
//! A key every instance of a fleet, and a restarted instance, must agree
//! on (the key of Condenser's compaction items): the first instance to
//! start stores the one it generated, every later one reads it.

use crate::store::{Result, Store};

impl Store {
    /// The key stored under `name`, storing `generated` first if there is
    /// none: whoever inserts first wins, everyone reads the winner.
    pub async fn shared_key(&self, name: &str, generated: &str) -> Result<String> {
        sqlx::query(
            "insert into server_keys (name, value) values ($1, $2) on conflict (name) do nothing",
        )
        .bind(name)
        .bind(generated)
        .execute(&self.pool)
        .await?;
        let value: String = sqlx::query_scalar("select value from server_keys where name = $1")
            .bind(name)
            .fetch_one(&self.pool)
            .await?;
        Ok(value)
    }
}
