"""The official OpenAI SDK through Condenser, across a compaction.

Run by tests/api/sdk.rs with CONDENSER_URL and API_KEY set; exits non-zero
(with the reason on stderr) when anything is not what a user expects."""
import os
import sys

from openai import OpenAI

client = OpenAI(base_url=os.environ["CONDENSER_URL"] + "/v1", api_key=os.environ["API_KEY"], max_retries=0)
MODEL = os.environ["MODEL"]
TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]

# A history far larger than the model's window.
messages = [{"role": "system", "content": "You are a coding agent."}]
for i in range(40):
    messages.append({"role": "user", "content": f"note {i}: " + "lorem ipsum dolor " * 40})
    messages.append({"role": "assistant", "content": f"noted {i}"})
messages.append({"role": "user", "content": "Read main.rs please. [tools]"})

raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=messages, tools=TOOLS)
completion = raw.parse()
compactions = int(raw.headers.get("x-condenser-compactions", "0"))
assert compactions >= 1, f"expected a compaction, headers: {dict(raw.headers)}"
call = completion.choices[0].message.tool_calls[0]
assert completion.choices[0].finish_reason == "tool_calls"

messages.append(completion.choices[0].message.model_dump(exclude_none=True))
messages.append({"role": "tool", "tool_call_id": call.id, "content": "fn main() {}"})
stream = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, stream=True,
                                        stream_options={"include_usage": True})
text, finish, usage = "", None, None
for chunk in stream:
    if chunk.usage:
        usage = chunk.usage
    for choice in chunk.choices:
        text += choice.delta.content or ""
        finish = choice.finish_reason or finish
assert text, "streamed text arrived"
assert finish == "stop", finish
assert usage is not None and usage.prompt_tokens > 0
print("openai sdk ok", compactions, len(text), file=sys.stderr)
