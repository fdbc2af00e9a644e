//! One integration binary (faster to link than one per file), one module per
//! stage of the request, as in ARCHITECTURE.md.

mod admin;
mod aider;
mod anthropic;
mod anthropic_native;
mod browser;
mod claude_code;
mod cloud_claude;
mod codex;

mod compaction;
mod conversations;
mod crashes;
mod disconnects;
mod failures;
mod fleet;
mod forwarding;
mod gemini;
mod gemini_cli;
mod helpers;
mod hostile;
mod kilo_code;
mod lifecycle;
mod local_servers;
mod loops;
mod native_responses;
mod opencode;
mod overload;
mod persistence;
mod process;
mod providers;
mod realllm;
mod relaying;
mod rescue;
mod responses;
mod sdk;
mod silent_upstreams;
mod sizing;
mod slow_clients;
mod store;
mod streaming;
mod summary_calls;
mod traces;
mod trust;
mod websocket;
