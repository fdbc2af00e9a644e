//! Beside the flow, configuration: the upstreams.
//!
//! Every upstream is one `[upstreams.NAME]` table of one shape, whatever
//! its provider. A table named for a provider (`[upstreams.ollama]`) sets
//! that provider's own upstream at Condenser's root; any other name is a
//! further upstream under its `path_prefix`, speaking its `protocol`. The
//! array form (`[[upstreams]]` with a `name` each) and the keys from
//! before the tables (`openai_base_url`, `[ollama]`, …) are still read;
//! a table wins over an older key.

use super::{ConfigError, Settings};
use crate::protocol::{providers, Protocol};
use serde::{Deserialize, Deserializer};
use std::collections::{BTreeMap, HashSet};

/// One upstream as configured: every field optional, filled in from the
/// provider it names.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamTable {
    /// Only in the array form; the table's key otherwise.
    #[serde(default)]
    pub name: String,
    pub base_url: Option<String>,
    pub protocol: Option<Protocol>,
    /// Requests under this path (e.g. `/groq`) go to this upstream, prefix
    /// removed; unset for a provider's own upstream at the root.
    pub path_prefix: Option<String>,
    /// The window its models are served with when a request sets none (a
    /// local server's default, e.g. Ollama's `num_ctx`).
    pub default_context_window: Option<u64>,
    /// What Condenser does with the providers' own compaction APIs on
    /// this upstream.
    pub native_compaction: Option<NativeCompaction>,
    /// Whether a client's WebSocket requests may go on over a socket of
    /// their own where the upstream serves the mode (`upstream/socket.rs`);
    /// tried by default, HTTP once refused.
    pub websocket: Option<bool>,
}

/// What Condenser does with a provider's own compaction API (OpenAI's
/// `/responses/compact`, `compaction_trigger` and `context_management`;
/// Anthropic's compaction and context editing) on one upstream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NativeCompaction {
    /// Forward where the upstream is the provider that defines the API,
    /// serve elsewhere, and serve once a forwarded call is refused as
    /// unknown.
    #[default]
    Auto,
    /// Pass the calls untouched.
    Forward,
    /// Condenser implements them with its own summaries.
    Serve,
}

/// The `[ollama]` section from before `[upstreams.ollama]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LegacySection {
    pub base_url: Option<String>,
    pub default_context_window: Option<u64>,
}

/// One upstream, resolved: what routing uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamSettings {
    pub name: String,
    pub base_url: String,
    pub protocol: Protocol,
    /// Empty for a provider's own upstream at Condenser's root.
    pub path_prefix: String,
    pub default_context_window: Option<u64>,
    pub native_compaction: NativeCompaction,
    pub websocket: bool,
}

/// `upstreams` as a table of tables, or as the older array of tables.
pub(super) fn tables<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<UpstreamTable>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Form {
        Named(BTreeMap<String, UpstreamTable>),
        Listed(Vec<UpstreamTable>),
    }
    Ok(match Form::deserialize(deserializer)? {
        Form::Named(named) => named
            .into_iter()
            .map(|(name, table)| UpstreamTable { name, ..table })
            .collect(),
        Form::Listed(listed) => listed,
    })
}

impl Settings {
    /// Every upstream: each provider's own at the root, in routing order,
    /// then the prefixed ones. Validated settings always resolve.
    pub fn upstreams(&self) -> Result<Vec<UpstreamSettings>, ConfigError> {
        let mut resolved = Vec::new();
        for protocol in providers() {
            if let Some(root) = self.root_upstream(protocol) {
                resolved.push(root);
            }
        }
        for (index, table) in self.upstreams.iter().enumerate() {
            if !is_root_table(table) {
                resolved.push(prefixed(index, table)?);
            }
        }
        Ok(resolved)
    }

    /// A provider's own upstream: its default, an older key, its table.
    fn root_upstream(&self, protocol: Protocol) -> Option<UpstreamSettings> {
        let root = protocol.provider().root()?;
        let name = protocol.as_str();
        let table = self
            .upstreams
            .iter()
            .rfind(|t| is_root_table(t) && t.name == name);
        let legacy = root.legacy_key.and_then(|key| self.legacy_base_url(key));
        let base_url = table.and_then(|t| t.base_url.clone()).or(legacy);
        let window = table.and_then(|t| t.default_context_window);
        let native = table.and_then(|t| t.native_compaction);
        Some(UpstreamSettings {
            name: name.to_string(),
            base_url: base_url.unwrap_or_else(|| root.base_url.to_string()),
            protocol,
            path_prefix: String::new(),
            default_context_window: window
                .or(root.legacy_key.and_then(|key| self.legacy_window(key)))
                .or(root.default_window),
            native_compaction: native.unwrap_or_default(),
            websocket: table.and_then(|t| t.websocket).unwrap_or(true),
        })
    }

    pub(super) fn validate_upstreams(&self) -> Result<(), ConfigError> {
        self.validate_legacy_keys()?;
        let resolved = self.upstreams()?;
        let mut names = HashSet::new();
        let mut prefixes = HashSet::new();
        for upstream in &resolved {
            let key = |field: &str| format!("upstreams.{}.{field}", upstream.name);
            super::validate::check_base_url(&key("base_url"), &upstream.base_url)?;
            if !names.insert(upstream.name.as_str()) {
                let problem = format!("duplicate upstream name {:?}", upstream.name);
                return Err(ConfigError::invalid(key("name"), problem));
            }
            let prefix = &upstream.path_prefix;
            if !prefix.is_empty() && !prefixes.insert(prefix.as_str()) {
                let problem = format!("duplicate path prefix {prefix:?}");
                return Err(ConfigError::invalid(key("path_prefix"), problem));
            }
        }
        Ok(())
    }
}

/// Whether a table sets a provider's own upstream: named for one, and
/// neither under a prefix nor speaking another protocol.
fn is_root_table(table: &UpstreamTable) -> bool {
    let Some(named) = Protocol::named(&table.name) else {
        return false;
    };
    let at_root = table.path_prefix.as_deref().unwrap_or("").is_empty();
    at_root && table.protocol.is_none_or(|p| p == named) && named.provider().root().is_some()
}

/// A further upstream under its own path prefix.
fn prefixed(index: usize, table: &UpstreamTable) -> Result<UpstreamSettings, ConfigError> {
    let key = |field: &str| match table.name.as_str() {
        "" => format!("upstreams[{index}].{field}"),
        name => format!("upstreams.{name}.{field}"),
    };
    if table.name.is_empty() {
        return Err(ConfigError::invalid(key("name"), "missing"));
    }
    let protocol = table.protocol.or(Protocol::named(&table.name));
    let protocol = protocol.ok_or_else(|| ConfigError::invalid(key("protocol"), "missing"))?;
    let base_url = table.base_url.clone();
    let base_url = base_url.ok_or_else(|| ConfigError::invalid(key("base_url"), "missing"))?;
    let prefix = table.path_prefix.clone().unwrap_or_default();
    if !prefix.starts_with('/') || prefix.ends_with('/') || prefix.len() < 2 {
        let problem = "must look like /name (leading slash, none trailing)";
        return Err(ConfigError::invalid(key("path_prefix"), problem));
    }
    if prefix == "/v1" {
        let problem = "/v1 is the default upstreams' path";
        return Err(ConfigError::invalid(key("path_prefix"), problem));
    }
    Ok(UpstreamSettings {
        name: table.name.clone(),
        base_url,
        protocol,
        path_prefix: prefix,
        default_context_window: table.default_context_window,
        native_compaction: table.native_compaction.unwrap_or_default(),
        websocket: table.websocket.unwrap_or(true),
    })
}

impl Settings {
    /// The keys from before `[upstreams.NAME]`, by the name a provider's
    /// [`crate::protocol::Root::legacy_key`] gives. Frozen: a new provider
    /// is configured by its table alone.
    fn legacy_base_url(&self, key: &str) -> Option<String> {
        match key {
            "openai_base_url" => self.openai_base_url.clone(),
            "anthropic_base_url" => self.anthropic_base_url.clone(),
            "gemini_base_url" => self.gemini_base_url.clone(),
            "ollama.base_url" => self.ollama.as_ref()?.base_url.clone(),
            _ => None,
        }
    }

    fn legacy_window(&self, key: &str) -> Option<u64> {
        match key {
            "ollama.base_url" => self.ollama.as_ref()?.default_context_window,
            _ => None,
        }
    }

    /// An older key is checked under its own name, as users wrote it.
    fn validate_legacy_keys(&self) -> Result<(), ConfigError> {
        for protocol in providers() {
            let Some(key) = protocol.provider().root().and_then(|r| r.legacy_key) else {
                continue;
            };
            if let Some(value) = self.legacy_base_url(key) {
                super::validate::check_base_url(key, &value)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings(value: serde_json::Value) -> Settings {
        let settings: Settings = serde_json::from_value(value).expect("deserializes");
        settings.validate().expect("valid");
        settings
    }

    fn find(settings: &Settings, name: &str) -> UpstreamSettings {
        let all = settings.upstreams().expect("resolves");
        all.into_iter().find(|u| u.name == name).expect(name)
    }

    #[test]
    fn every_provider_has_its_own_upstream_by_default() {
        let all = settings(json!({})).upstreams().expect("resolves");
        let names: Vec<_> = all.iter().map(|u| u.protocol).collect();
        assert_eq!(
            names,
            providers(),
            "one root upstream per provider, in order"
        );
        assert!(all.iter().all(|u| u.path_prefix.is_empty()));
    }

    #[test]
    fn a_table_named_for_a_provider_sets_its_root_and_wins_over_older_keys() {
        let tables = settings(json!({
            "openai_base_url": "http://old.example/v1",
            "ollama": {"base_url": "http://old.example:11434", "default_context_window": 8192},
            "upstreams": {
                "openai": {"base_url": "http://new.example/v1"},
                "ollama": {"default_context_window": 32768},
                "groq": {"protocol": "openai", "base_url": "https://api.groq.com/openai/v1",
                         "path_prefix": "/groq"},
            },
        }));
        assert_eq!(find(&tables, "openai").base_url, "http://new.example/v1");
        let ollama = find(&tables, "ollama");
        assert_eq!(ollama.base_url, "http://old.example:11434");
        assert_eq!(ollama.default_context_window, Some(32768));
        assert_eq!(find(&tables, "groq").path_prefix, "/groq");
    }

    #[test]
    fn the_array_form_is_still_read_and_a_prefixed_upstream_needs_its_fields() {
        let listed = settings(json!({"upstreams": [{"name": "groq", "protocol": "openai",
            "base_url": "https://api.groq.com/openai/v1", "path_prefix": "/groq"}]}));
        assert_eq!(
            find(&listed, "groq").protocol,
            crate::protocol::openai::PROTOCOL
        );
        let missing: Settings = serde_json::from_value(
            json!({"upstreams": {"groq": {"base_url": "https://api.groq.com/openai/v1"}}}),
        )
        .expect("deserializes");
        let error = missing.validate().expect_err("no protocol").to_string();
        assert!(error.contains("upstreams.groq.protocol"), "{error}");
    }
}
