//! Step 6, detect overflow: the table.
//!
//! The built-in signature table: which error texts and JSON fields mean
//! "context overflow", per provider. Data only; `matcher.rs` runs it.
//!
//! Texts are the providers' own error wordings, captured from their APIs
//! and from the issues users filed; those added later name their public
//! source beside them. Patterns are
//! written in lower case and run on each lower-cased message separately;
//! `{N}` is a token count (see `numbers.rs`) and the named groups feed the
//! signal.
//! Message patterns of all signatures are tried before any field check, so
//! order only decides which name a message gets: specific wordings first.

use super::OverflowCause;
use super::OverflowCause::{Bytes, InputPlusOutput};

/// One message pattern; `hint` is the cause when the match carries no
/// numbers to compute it from (the wording alone says max_tokens is to blame).
pub(super) struct Pat {
    pub re: &'static str,
    pub hint: Option<OverflowCause>,
}

/// A JSON field check, anywhere in the body.
#[derive(Debug, Clone, Copy)]
pub(super) enum Field {
    /// `key` holds this string (any case).
    Equals(&'static str, &'static str),
    /// `key` exists.
    Present(&'static str),
}

/// One named signature before compilation.
pub(super) struct Spec {
    pub name: &'static str,
    /// Empty means the usual statuses (400, 413, 200 for stream events).
    /// A 5xx is judged only by the signatures that list it here.
    pub statuses: &'static [u16],
    pub patterns: &'static [Pat],
    pub fields: &'static [Field],
    /// Fixed cause, overriding numbers (byte limits are never about tokens).
    pub cause: Option<OverflowCause>,
}

const fn p(re: &'static str) -> Pat {
    Pat { re, hint: None }
}

const fn p_output(re: &'static str) -> Pat {
    Pat {
        re,
        hint: Some(InputPlusOutput),
    }
}

const fn sig(name: &'static str, patterns: &'static [Pat]) -> Spec {
    Spec {
        name,
        statuses: &[],
        patterns,
        fields: &[],
        cause: None,
    }
}

impl Spec {
    const fn fields(mut self, fields: &'static [Field]) -> Self {
        self.fields = fields;
        self
    }

    /// Only these statuses, in place of the usual ones.
    const fn on(mut self, statuses: &'static [u16]) -> Self {
        self.statuses = statuses;
        self
    }

    const fn bytes_on(mut self, statuses: &'static [u16]) -> Self {
        self.statuses = statuses;
        self.cause = Some(Bytes);
        self
    }
}

/// Texts that look like overflow but are rate limits or other limits that
/// compaction cannot fix; any hit in a message or `code`/`type` vetoes.
pub(super) const VETOES: &[&str] = &[
    r"rate[ _-]?limit",
    r"too many requests",
    r"(?:tokens|requests) per (?:min|minute|day)\b",
    r"\b[tr]p[md]\b",
    r"throttl",
    r"please wait",
    r"resource[_ ]exhausted",
    r"string_above_max_length",
    r"invalid 'user'.*string too long",
    // A refused parameter echoes its name, which a client may have chosen
    // to read like an overflow ("Unrecognized request argument supplied:
    // maximum context length is 1000 tokens").
    r"unrecognized request argument",
    r"unknown parameter",
];

/// The built-in table, most specific wording first.
pub(super) const BUILTIN: &[Spec] = &[
    sig("anthropic-bytes", &[
        p(r"request exceeds the maximum allowed number of bytes"),
        p(r"\brequest_too_large\b"),
    ])
    .fields(&[Field::Equals("type", "request_too_large")])
    .bytes_on(&[]),
    sig("gemini-payload", &[p(r"request payload size exceeds the limit")]).bytes_on(&[]),
    // Bedrock's byte cap, also relayed as `{"message":…}` by OpenAI-compatible
    // gateways in front of Bedrock (strands-agents/harness-sdk#1528; issue 29).
    sig("bedrock-bytes", &[p(r"too many total text bytes")]).bytes_on(&[]),
    sig("anthropic", &[
        p(r"prompt is too long:?\s*(?<actual>{N})\s*tokens?\s*>\s*(?<limit>{N})"),
        p_output(r"input length and .?max_tokens.? exceed context limit:?\s*(?<actual>{N})\s*\+\s*(?<output>{N})\s*>\s*(?<limit>{N})"),
        p_output(r"input length and .?max_tokens.? exceed context limit"),
        p(r"prompt is too long"),
    ]),
    sig("bedrock", &[
        p(r"prompt tokens \((?<actual>{N})\) exceed model maximum \((?<limit>{N})\)"),
        p(r"input is too long for requested model"),
        p(r"too many input tokens"),
    ]),
    sig("vllm", &[
        p(r"maximum context length is (?<limit>{N}) tokens\.?\s*however,? your request has (?<actual>{N}) input tokens(?: plus (?<output>{N}))?"),
        p(r"maximum context length is (?<limit>{N}) tokens\.?\s*however,? you requested (?<output>{N}) output tokens and your prompt contains at least (?<actual>{N}) input tokens"),
        p(r"you requested (?<output>{N}) output tokens and your prompt contains at least (?<actual>{N}) input tokens"),
        // 0.33 (vllm/renderers/params.py): the input alone is too long; the
        // `characters` form is refused before tokenizing, so only the limit
        // is a token count.
        p(r"maximum context length is (?<limit>{N}) tokens\.?\s*however,? your prompt contains (?:at least )?(?<actual>{N}) input tokens"),
        p(r"maximum context length is (?<limit>{N}) tokens\.?\s*however,? your prompt contains {N} characters"),
        // Between the two (vllm/renderers/params.py at 017638d): the input is
        // too long for the window less the requested output.
        p(r"you passed (?<actual>{N}) input tokens and requested (?<output>{N}) output tokens\.?\s*however,? the model.?s context length is only (?<limit>{N}) tokens"),
        // 0.33 (entrypoints/serve/utils/api_utils.py).
        p(r"input length \((?<actual>{N})\) exceeds model.?s maximum context length \((?<limit>{N})\)"),
        // The engine's own check (v1/engine/input_processor.py), "decoder" or
        // "encoder"; for a stream it arrives in-band, as a 200.
        p(r"\w+ prompt \(length (?<actual>{N})\) is longer than the maximum model length of (?<limit>{N})"),
        p(r"is longer than the maximum model length of (?<limit>{N})"),
        // Older: max_tokens too large for what the input leaves; both endings,
        // `(parameter=max_tokens, value=…)` and ` None` (issue 29).
        p(r".?max_tokens.? or .?max_completion_tokens.? is too large:?\s*(?<output>{N}).*?maximum context length is (?<limit>{N}) tokens and your request has (?<actual>{N}) input tokens"),
        p_output(r"please reduce one or the other"),
        p(r"context length is only (?<limit>{N}) tokens"),
    ]),
    sig("openrouter", &[
        p(r"endpoint.?s maximum context length is (?<limit>{N}) tokens\.?\s*however,? you requested about (?<total>{N}) tokens(?:[^)]*?(?<output>{N}) in the output)?"),
        p(r"endpoint.?s maximum context length is (?<limit>{N}) tokens"),
    ]),
    sig("cerebras", &[p(r"current length is (?<actual>{N}) while limit is (?<limit>{N})")]),
    sig("groq", &[p(r"^please reduce the length of the messages or completion\.?$")]),
    // SGLang (tokenizer_manager.py, sglang 0.5.23; issue 29). Before LiteLLM,
    // which relays the second wording: a relay that keeps its numbers is
    // named for the server that wrote them. Some hosts print counts as
    // floats (`524300.0 tokens`).
    sig("sglang", &[
        p(r"input \((?<actual>{N}) tokens\) is longer than the model.?s context length \((?<limit>{N}) tokens\)"),
        p(r"requested token count exceeds the model.?s maximum context length of (?<limit>{N}) tokens\.?\s*you requested a total of (?<total>{N})(?:\.0+)? tokens:?\s*(?<actual>{N})(?:\.0+)? tokens from the input messages and (?<output>{N})(?:\.0+)? tokens for the completion"),
        p(r"is longer than the model.?s (?:maximum )?context length"),
    ]),
    sig("litellm", &[
        p(r"requested token count exceeds the model.?s maximum context length of (?<limit>{N}) tokens"),
        p(r"contextwindowexceedederror"),
    ]),
    sig("openai", &[
        p(r"this model.?s maximum context length is (?<limit>{N}) tokens\.?\s*however,? your messages resulted in (?<actual>{N}) tokens"),
        p(r"this model.?s maximum context length is (?<limit>{N}) tokens\.?\s*however,? you requested (?<total>{N}) tokens \((?<actual>{N}) in the messages, (?:(?<extra>{N}) in the functions, and )?(?<output>{N}) in the completion\)"),
        p(r"this model.?s maximum context length is (?<limit>{N}) tokens\.?\s*however,? you requested (?<total>{N}) tokens"),
        p(r"this model.?s maximum context length is (?<limit>{N}) tokens"),
        p(r"exceeds the context window"),
        p(r"reduce the length of the messages"),
    ])
    .fields(&[Field::Equals("code", "context_length_exceeded")]),
    sig("gemini", &[
        p(r"input token count \((?<actual>{N})\) exceeds the maximum number of tokens allowed \((?<limit>{N})\)"),
        p(r"input token count exceeds the maximum number of tokens allowed \(?(?<limit>{N})"),
        p(r"exceeds the maximum number of tokens allowed"),
    ]),
    sig("mistral", &[
        p(r"prompt contains (?<actual>{N}) tokens(?: and (?<extra>{N}) draft tokens)?,? too large for model with (?<limit>{N}) maximum context length"),
        p(r"too large for model with {N} maximum context length"),
    ]),
    sig("xai", &[
        p(r"maximum prompt length is (?<limit>{N}) but the request contains (?<actual>{N}) tokens"),
        p(r"maximum prompt length is (?<limit>{N})"),
    ]),
    sig("llama.cpp", &[
        p(r"request \((?<actual>{N}) tokens\) exceeds the available context size \((?<limit>{N}) tokens\)"),
        p(r"exceeds the available context size"),
    ])
    .fields(&[Field::Equals("type", "exceed_context_size_error"), Field::Present("n_ctx")]),
    // llama.cpp also reports overflow as 500 `server_error`: older builds for
    // "the request exceeds the available context size", and any build when
    // decoding finds no free KV cell ("context size has been exceeded.", the
    // prompt plus what was generated; tools/server/server-context.cpp). The
    // only 5xx the table judges (issue 29).
    sig("llama.cpp", &[
        p(r"exceeds the available context size"),
        p_output(r"context size has been exceeded"),
    ])
    .on(&[500]),
    // Ollama with `truncate: false`: v0.12.6–v0.29 word it themselves;
    // v0.30+ pass llama-server's body on as a string, which the
    // llama.cpp wording matches (ollama/ollama#16800, server/routes.go).
    sig("ollama", &[
        p(r"prompt too long; exceeded (?:max )?context length"),
        p(r"the input length exceeds the context length"),
        p(r"the prompt is longer than the context length currently available"),
    ]),
    // LM Studio (lmstudio-bug-tracker#237, #546): the tokens it must keep are
    // the prompt (its first message, when it truncates the middle), so at
    // least that much input.
    sig("lmstudio", &[
        p(r"trying to keep the first (?<actual>{N}) tokens when context (?:the )?overflows.*?context length of only (?<limit>{N}) tokens"),
        p(r"greater than the context length \(n_keep:\s*(?<actual>{N})\s*>=\s*n_ctx:\s*(?<limit>{N})\)"),
        p(r"context length of only (?<limit>{N}) tokens"),
        p(r"greater than the context length"),
        p(r"context size has been exceeded"),
    ]),
    sig("tgi", &[
        p(r".?inputs.? tokens \+ .?max_new_tokens.? must be <= (?<limit>{N})\.?\s*given:?\s*(?<actual>{N}) .?inputs.? tokens and (?<output>{N}) .?max_new_tokens"),
        p(r".?inputs.? tokens \+ .?max_new_tokens.? must be"),
    ]),
    sig("kimi", &[p(r"exceeded model token limit:?\s*(?<limit>{N})(?:\s*\(requested:?\s*(?<total>{N})\))?")]),
    sig("minimax", &[p(r"context window exceeds limit")]),
    sig("copilot", &[p(r"prompt token count of (?<actual>{N}) exceeds the limit of (?<limit>{N})")])
        .fields(&[Field::Equals("code", "model_max_prompt_tokens_exceeded")]),
    sig("input-length", &[
        p(r"input length (?<actual>{N}) exceeds the maximum allowed input length of (?<limit>{N}) tokens"),
        p(r"exceeds (?:the )?maximum allowed input length of (?<limit>{N}) tokens"),
    ]),
    sig("generic", &[
        p(r"exceeds (?:the )?(?:model.?s )?maximum context length(?: of (?<limit>{N}) tokens?)?"),
        p(r"context[_ ](?:length|window)[_ ]exceeded"),
        p(r"input tokens exceed the configured limit"),
        p(r"model.?s maximum context (?:length|limit)"),
        p(r"too many tokens"),
        p(r"token limit exceeded"),
    ])
    .fields(&[
        Field::Equals("code", "context_window_exceeded"),
        Field::Equals("code", "model_context_window_exceeded"),
    ]),
    // Last: a bare 413 (proxy HTML, or no body at all) is a size refusal.
    sig("http-413", &[p(r"too large"), p(r"^\s*$")]).bytes_on(&[413]),
];
