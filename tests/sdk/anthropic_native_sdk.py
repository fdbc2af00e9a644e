"""The official Anthropic SDK's context management betas through Condenser
to a third-party Messages service (issue 40): every request accepted, the
cleared tool uses reported as the API reports them."""
import os
import sys

import anthropic

client = anthropic.Anthropic(base_url=os.environ["CONDENSER_URL"], api_key=os.environ["API_KEY"], max_retries=0)
MODEL = os.environ["MODEL"]
TOOLS = [{"name": "read_file", "description": "Read a file",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]

messages = [{"role": "user", "content": "Read the files."}]
for i in range(4):
    messages.append({"role": "assistant", "content": [
        {"type": "tool_use", "id": f"toolu_{i:02}", "name": "read_file", "input": {"path": f"f{i}.rs"}}]})
    messages.append({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": f"toolu_{i:02}", "content": f"// file {i}\n" + "fn f() {}\n" * 300}]})

edits = [{"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 2000},
          "keep": {"type": "tool_uses", "value": 1}},
         {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 150000}}]
message = client.beta.messages.create(model=MODEL, max_tokens=256, messages=messages, tools=TOOLS,
                                      betas=["compact-2026-01-12", "context-management-2025-06-27"],
                                      context_management={"edits": edits})
applied = message.context_management.applied_edits
assert len(applied) == 1 and applied[0].type == "clear_tool_uses_20250919", applied
assert applied[0].cleared_tool_uses == 3, applied
assert applied[0].cleared_input_tokens > 0, applied

# Streamed: the report arrives in the final message_delta.
reported = None
with client.beta.messages.stream(model=MODEL, max_tokens=256, messages=messages, tools=TOOLS,
                                 betas=["context-management-2025-06-27"],
                                 context_management={"edits": edits[:1]}) as stream:
    for event in stream:
        if event.type == "message_delta":
            reported = event.context_management
assert reported is not None and reported.applied_edits[0].cleared_tool_uses == 3, reported

# A Claude Code-style request: thinking on, clear_thinking keeping all.
message = client.beta.messages.create(
    model=MODEL, max_tokens=4096, thinking={"type": "enabled", "budget_tokens": 1024},
    messages=[{"role": "user", "content": "hello"}],
    betas=["interleaved-thinking-2025-05-14", "context-management-2025-06-27"],
    context_management={"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]})
assert message.context_management.applied_edits == [], message.context_management

# A compaction block sent back: what precedes it is replaced.
message = client.beta.messages.create(
    model=MODEL, max_tokens=256, betas=["compact-2026-01-12"],
    messages=[{"role": "user", "content": "an old question"},
              {"role": "assistant", "content": [{"type": "compaction", "content": "We read four files."}]},
              {"role": "user", "content": "What next?"}])
assert message.stop_reason == "end_turn", message.stop_reason
# On-demand compaction: a summary in place of a reply, then sent back first.
history = [{"role": "user", "content": "Name the entities of a recipe app."},
           {"role": "assistant", "content": "Recipe, Ingredient, Step."},
           {"role": "user", "content": "Now the fields of Recipe."}]
summary = client.beta.messages.create(model=MODEL, max_tokens=2048, messages=history,
                                      betas=["compact-2026-09-04"], extra_body={"compaction": {"type": "summarize"}})
assert summary.stop_reason == "compaction", summary.stop_reason
assert summary.content[0].type == "compaction" and summary.content[0].content, summary.content
message = client.beta.messages.create(
    model=MODEL, max_tokens=256, betas=["compact-2026-09-04"],
    messages=[{"role": "assistant", "content": [summary.content[0].model_dump(exclude_none=True)]},
              {"role": "user", "content": "And Ingredient?"}])
assert message.stop_reason == "end_turn", message.stop_reason
print("anthropic native sdk ok", file=sys.stderr)
