//! Operator commands that read or prepare the database.

use crate::cli::{Command, ConversationsCommand};
use crate::config::Settings;
use crate::store::{render_detail, render_list, Store};
use anyhow::Context;
use std::io::Write;

pub async fn run(command: Command, settings: &Settings) -> anyhow::Result<()> {
    let store = Store::connect(
        &settings.database_url,
        &crate::state::store_options(settings),
    )
    .await
    .context("connecting to the database")?;
    store.migrate().await.context("migrating the database")?;
    let text = match command {
        Command::Migrate => "migrations applied\n".to_string(),
        Command::Conversations(ConversationsCommand::List { limit }) => {
            render_list(&store.list_conversations(limit).await?)
        }
        Command::Conversations(ConversationsCommand::Show { id }) => {
            match store.conversation(&id).await? {
                Some(detail) => render_detail(&detail),
                None => anyhow::bail!("no conversation matches {id:?}"),
            }
        }
        Command::Serve | Command::CheckConfig => unreachable!("handled by main"),
    };
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(())
}
