//! Operator commands that read or prepare the database.

use crate::cli::{Command, ConversationsCommand};
use crate::config::Settings;
use crate::store::{render_detail, render_list, Store};
use anyhow::Context;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

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
        Command::Serve | Command::CheckConfig | Command::Healthcheck => {
            unreachable!("handled by main")
        }
    };
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(())
}

/// Probes `GET /healthz` of the instance listening on `listen`. A wildcard
/// listen address (`0.0.0.0`, as in containers) is probed on loopback.
pub async fn healthcheck(listen: SocketAddr) -> anyhow::Result<()> {
    let url = format!("http://{}/healthz", probe_address(listen));
    let response = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()?
        .get(&url)
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    anyhow::ensure!(
        response.status().is_success(),
        "GET {url} answered {}",
        response.status()
    );
    Ok(())
}

fn probe_address(listen: SocketAddr) -> SocketAddr {
    match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, listen.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, listen.port()).into(),
        _ => listen,
    }
}
