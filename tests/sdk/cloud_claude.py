"""The Anthropic SDK's Bedrock and Vertex clients through Condenser: an
overflow rescued while the stream waits on keep-alives (which the SDK's own
parser reads: botocore's event-stream decoder for Bedrock), usage read
from the stream, thinking blocks returned intact across turns."""
import os
import sys

import anthropic

CLOUD = os.environ["CLOUD"]
URL = os.environ["CONDENSER_URL"]
KEY = os.environ["API_KEY"]
MODEL = os.environ["MODEL"]

if CLOUD == "bedrock":
    client = anthropic.AnthropicBedrock(api_key=KEY, base_url=URL, aws_region="us-east-1", max_retries=0)
else:
    client = anthropic.AnthropicVertex(access_token=KEY, base_url=URL + "/v1", region="us-east5",
                                       project_id="condenser-test", max_retries=0)

TOOLS = [{"name": "read_file", "description": "Read a file",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
SYSTEM = "You are a coding agent."

messages = []
for i in range(40):
    messages.append({"role": "user", "content": f"note {i}: " + "lorem ipsum dolor " * 40})
    messages.append({"role": "assistant", "content": f"noted {i}"})
messages.append({"role": "user", "content": "Read main.rs please. [tools]"})

# Streamed, over the window: Condenser compacts while the stream waits.
with client.messages.stream(model=MODEL, max_tokens=256, system=SYSTEM, messages=messages, tools=TOOLS) as stream:
    headers = stream.response.headers
    assert headers.get("x-condenser-compacting") == "streamed", dict(headers)
    final = stream.get_final_message()
assert final.stop_reason == "tool_use", final.stop_reason
assert final.usage.input_tokens > 0 and final.usage.output_tokens > 0, final.usage
tool_use = next(block for block in final.content if block.type == "tool_use")

messages.append({"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in final.content]})
messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "fn main() {}"}]})
thinking = {"type": "enabled", "budget_tokens": 1024}
message = client.messages.create(model=MODEL, max_tokens=2048, system=SYSTEM, messages=messages, tools=TOOLS,
                                 thinking=thinking)
assert message.content[0].type == "thinking" and message.content[0].signature, message.content
assert message.stop_reason == "end_turn", message.stop_reason

# The thinking block goes back as it came: the upstream checks its signature.
messages.append({"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in message.content]})
messages.append({"role": "user", "content": "Thanks. What next?"})
with client.messages.stream(model=MODEL, max_tokens=2048, system=SYSTEM, messages=messages, tools=TOOLS,
                            thinking=thinking) as stream:
    text = "".join(stream.text_stream)
    last = stream.get_final_message()
assert text, "streamed text arrived"
assert last.content[0].type == "thinking", last.content
assert last.usage.input_tokens > 0, last.usage
print(CLOUD, "sdk ok", len(text), file=sys.stderr)
