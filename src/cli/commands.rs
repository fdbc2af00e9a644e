//! Beside the flow, the command line: operator commands.
//!
//! Operator commands that read or prepare the database.

use super::render::{render_detail, render_list};
use crate::cli::{Command, ConversationsCommand, TenantsCommand};
use crate::config::Settings;
use crate::conversation::TenantId;
use crate::store::{Deleted, DetailQuery, Store};
use anyhow::Context;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

pub async fn run(command: Command, settings: &Settings) -> anyhow::Result<()> {
    let mut options = crate::state::store_options(settings);
    // An operator command may wait for a busy database; a request may not.
    options.acquire_timeout = options.acquire_timeout.max(Duration::from_secs(30));
    let store = Store::connect(&settings.database_url, &options)
        .await
        .context("connecting to the database")?;
    store.migrate().await.context("migrating the database")?;
    let text = match command {
        Command::Migrate => "migrations applied\n".to_string(),
        Command::Conversations(ConversationsCommand::List { limit }) => {
            render_list(&store.list_conversations(limit).await?)
        }
        Command::Conversations(ConversationsCommand::Show {
            id,
            messages,
            limit,
            page,
        }) => {
            let limit = limit.clamp(1, 10_000);
            let query = DetailQuery {
                positions: messages.max(1),
                limit,
                offset: (page.max(1) - 1).saturating_mul(limit),
            };
            match store.conversation_page(&id, &query).await? {
                Some(detail) => render_detail(&detail),
                None => anyhow::bail!("no conversation matches {id:?}"),
            }
        }
        Command::Conversations(ConversationsCommand::Delete { id }) => {
            let Some((tenant, conversation)) = store.find_conversation(&id).await? else {
                anyhow::bail!("no conversation matches {id:?}");
            };
            let deleted = store.delete_conversation(&tenant, &conversation).await?;
            format!(
                "deleted conversation {conversation}: {}\n",
                describe(&deleted)
            )
        }
        Command::Tenants(TenantsCommand::Delete) => {
            let salt = settings.storage.tenant_salt.as_bytes();
            let mut total = Deleted::default();
            for tenant in tenants_of(&read_credential()?, salt) {
                let deleted = store.delete_tenant(&tenant).await?;
                total = add(total, deleted);
            }
            format!("deleted tenant: {}\n", describe(&total))
        }
        Command::Serve | Command::CheckConfig | Command::Healthcheck => {
            unreachable!("handled by main")
        }
    };
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(())
}

/// The credential, from standard input so it stays out of the shell
/// history and the process list.
fn read_credential() -> anyhow::Result<String> {
    let mut input = String::new();
    std::io::stdin()
        .read_to_string(&mut input)
        .context("reading the credential from standard input")?;
    let credential = input.trim().to_owned();
    anyhow::ensure!(!credential.is_empty(), "no credential on standard input");
    Ok(credential)
}

/// The digests a credential is filed under: a client sends it bare
/// (`x-api-key`) or as `Authorization: Bearer …`, and the digest is of the
/// header value as sent.
fn tenants_of(credential: &str, salt: &[u8]) -> Vec<TenantId> {
    let bare = credential.strip_prefix("Bearer ").unwrap_or(credential);
    [bare.to_owned(), format!("Bearer {bare}")]
        .iter()
        .map(|value| TenantId::from_credential(salt, Some(value.as_bytes())))
        .collect()
}

fn add(a: Deleted, b: Deleted) -> Deleted {
    Deleted {
        compactions: a.compactions + b.compactions,
        leases: a.leases + b.leases,
        messages: a.messages + b.messages,
        requests: a.requests + b.requests,
        conversations: a.conversations + b.conversations,
    }
}

fn describe(deleted: &Deleted) -> String {
    format!(
        "{} conversations, {} messages, {} compactions, {} request records",
        deleted.conversations, deleted.messages, deleted.compactions, deleted.requests
    )
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
