//! Steps 1 to 7, the protocol seam: the registry of providers.
//!
//! Which providers there are, in routing order, and how a name in the
//! configuration finds one.

use super::{anthropic, bedrock, gemini, ollama, openai, vertex, Protocol, Provider};
use serde::{Deserialize, Deserializer};
use std::sync::RwLock;

/// The built-in providers, in the order a request at Condenser's root is
/// offered to them: the first whose [`Provider::claims`] holds gets it, so
/// the catch-all (OpenAI's, whose paths every compatible server copies)
/// comes last. Adding a provider to the crate is one line here.
static BUILT_IN: &[&dyn Provider] = &[
    &ollama::Ollama,
    &gemini::Gemini,
    &bedrock::Bedrock,
    &vertex::Vertex,
    &anthropic::Anthropic,
    &openai::OpenAi,
];

/// Providers registered at run time ([`register`]), offered before the
/// built-in ones.
static REGISTERED: RwLock<Vec<&'static dyn Provider>> = RwLock::new(Vec::new());

/// Adds a provider defined outside the crate (an embedding program's own
/// dialect). Registering a name twice keeps the first. Call it before the
/// settings are loaded: a `protocol = "NAME"` setting is resolved then.
pub fn register(provider: &'static dyn Provider) {
    let mut registered = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    let taken = |p: &&dyn Provider| p.name() == provider.name();
    if !registered.iter().any(taken) && !BUILT_IN.iter().any(taken) {
        registered.push(provider);
    }
}

/// Every provider, in routing order.
pub fn providers() -> Vec<Protocol> {
    let registered = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
    registered
        .iter()
        .chain(BUILT_IN)
        .map(|p| Protocol::of(*p))
        .collect()
}

impl Protocol {
    /// The registered provider called `name`.
    pub fn named(name: &str) -> Option<Self> {
        providers().into_iter().find(|p| p.as_str() == name)
    }
}

impl<'de> Deserialize<'de> for Protocol {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Protocol::named(&name).ok_or_else(|| {
            let known: Vec<_> = providers().iter().map(|p| p.as_str()).collect();
            serde::de::Error::custom(format!(
                "unknown protocol {name:?}; known: {}",
                known.join(", ")
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ErrorClass, ErrorInfo};

    /// A provider missing from a registry would route nowhere, answer
    /// errors in another's shape or be unnamed in configuration: each
    /// built-in one is reachable by name, from its own chat adapter, and
    /// through every seam the rest of the crate asks.
    #[test]
    fn every_built_in_provider_is_in_every_registry() {
        for provider in BUILT_IN {
            let protocol = Protocol::named(provider.name()).expect("named");
            assert_eq!(protocol.as_str(), provider.name());
            let info = ErrorInfo {
                status: 502,
                kind: "upstream_unreachable",
                message: "down",
                class: ErrorClass::Server,
            };
            assert!(provider.error_body(&info).to_string().contains("down"));
            assert!(!provider.telemetry().provider.is_empty());
            let root = provider.root().expect("built-in providers serve the root");
            assert!(root.base_url.starts_with("http"));
        }
    }
}
