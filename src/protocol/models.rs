//! Step 7, compact: what model families accept, for the one request
//! Condenser writes itself. Everything else it forwards was written by the
//! client and accepted by the provider; the summary call copies what the
//! client's request shows and falls back on these rules where it shows
//! nothing (a different summary model, a field the client left out).
//!
//! Sources: OpenAI's API reference (`max_tokens` "not compatible with
//! o-series models"; `reasoning_effort` values per model), and the refusals
//! reasoning models answer with (openai/openai-openapi; captures in
//! griptape-ai/ComfyUI-Griptape#312, openai-agents-python#2089,
//! openai/codex#6647).

/// The field a Chat Completions request's output limit goes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputField {
    MaxTokens,
    /// The only one OpenAI's reasoning models take; it counts their
    /// reasoning tokens too.
    MaxCompletionTokens,
}

impl OutputField {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::MaxTokens => "max_tokens",
            Self::MaxCompletionTokens => "max_completion_tokens",
        }
    }

    pub const fn other(self) -> Self {
        match self {
            Self::MaxTokens => Self::MaxCompletionTokens,
            Self::MaxCompletionTokens => Self::MaxTokens,
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        [Self::MaxTokens, Self::MaxCompletionTokens]
            .into_iter()
            .find(|field| field.as_str() == name)
    }
}

/// The model's own name, without a router's `vendor/` prefix.
fn base_name(model: &str) -> &str {
    model.rsplit('/').next().unwrap_or(model)
}

/// OpenAI's reasoning models: the o-series, the gpt-5 family and later,
/// and codex-mini; not the `*-chat-latest` aliases, which do not reason.
pub fn is_reasoning_model(model: &str) -> bool {
    let name = base_name(model).to_ascii_lowercase();
    let o_series = name.starts_with('o') && name[1..].starts_with(|c: char| c.is_ascii_digit());
    let gpt = ["gpt-5", "gpt-6", "gpt-7"]
        .iter()
        .any(|p| name.starts_with(p));
    let chat_alias = name.contains("chat-latest") || name.starts_with("gpt-5-chat");
    (o_series || gpt || name.starts_with("codex-mini")) && !chat_alias
}

/// The lowest `reasoning_effort` a reasoning model accepts: a summary
/// needs no deliberation, and every reasoning token is paid for.
pub fn lowest_effort(model: &str) -> &'static str {
    let name = base_name(model).to_ascii_lowercase();
    if name.starts_with("gpt-5-pro") {
        "high"
    } else if name.contains("codex") || name.starts_with('o') {
        "low"
    } else if is_gpt_5_0(&name) {
        "minimal"
    } else if name.starts_with("gpt-") {
        "none"
    } else {
        "low"
    }
}

/// gpt-5, gpt-5-mini, gpt-5-nano and their dated snapshots: the family
/// before gpt-5.1, which takes `minimal` and refuses `none`.
fn is_gpt_5_0(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("gpt-5") else {
        return false;
    };
    !rest.starts_with('.')
}

/// o1-mini and o1-preview refuse both `system` and `developer` messages.
pub fn refuses_system_messages(model: &str) -> bool {
    let name = base_name(model).to_ascii_lowercase();
    name.starts_with("o1-mini") || name.starts_with("o1-preview")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_models_are_told_from_their_names() {
        for model in [
            "o1",
            "o3-mini",
            "o4-mini-2025-04-16",
            "gpt-5",
            "gpt-5.1-codex",
            "openai/gpt-5-mini",
            "codex-mini-latest",
        ] {
            assert!(is_reasoning_model(model), "{model}");
        }
        for model in [
            "gpt-4o",
            "gpt-4.1-mini",
            "gpt-5-chat-latest",
            "gpt-5.1-chat-latest",
            "ollama-model",
            "claude-sonnet-4-5",
        ] {
            assert!(!is_reasoning_model(model), "{model}");
        }
    }

    #[test]
    fn each_family_gets_the_lowest_effort_it_accepts() {
        assert_eq!(lowest_effort("o4-mini"), "low");
        assert_eq!(lowest_effort("gpt-5-mini-2025-08-07"), "minimal");
        assert_eq!(lowest_effort("gpt-5.1"), "none");
        assert_eq!(lowest_effort("gpt-5.2-mini"), "none");
        assert_eq!(lowest_effort("gpt-5-codex"), "low");
        assert_eq!(lowest_effort("gpt-5.1-codex-max"), "low");
        assert_eq!(lowest_effort("gpt-5-pro"), "high");
    }

    #[test]
    fn output_fields_name_each_other() {
        let field = OutputField::parse("max_tokens").expect("known");
        assert_eq!(field.other(), OutputField::MaxCompletionTokens);
        assert_eq!(field.other().other(), field);
        assert_eq!(OutputField::parse("max_output_tokens"), None);
    }
}
