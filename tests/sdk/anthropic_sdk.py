"""The official Anthropic SDK through Condenser, across a compaction."""
import os
import sys

import anthropic

client = anthropic.Anthropic(base_url=os.environ["CONDENSER_URL"], api_key=os.environ["API_KEY"], max_retries=0)
MODEL = os.environ["MODEL"]
TOOLS = [{"name": "read_file", "description": "Read a file",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]

messages = []
for i in range(40):
    messages.append({"role": "user", "content": f"note {i}: " + "lorem ipsum dolor " * 40})
    messages.append({"role": "assistant", "content": f"noted {i}"})
messages.append({"role": "user", "content": "Read main.rs please. [tools]"})

raw = client.messages.with_raw_response.create(model=MODEL, max_tokens=256, system="You are a coding agent.",
                                               messages=messages, tools=TOOLS)
message = raw.parse()
compactions = int(raw.headers.get("x-condenser-compactions", "0"))
assert compactions >= 1, f"expected a compaction, headers: {dict(raw.headers)}"
assert message.stop_reason == "tool_use", message.stop_reason
tool_use = next(block for block in message.content if block.type == "tool_use")

messages.append({"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in message.content]})
messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "fn main() {}"}]})
with client.messages.stream(model=MODEL, max_tokens=256, system="You are a coding agent.",
                            messages=messages, tools=TOOLS) as stream:
    text = "".join(stream.text_stream)
    final = stream.get_final_message()
assert text, "streamed text arrived"
assert final.stop_reason == "end_turn", final.stop_reason
assert final.usage.output_tokens > 0
print("anthropic sdk ok", compactions, len(text), file=sys.stderr)
