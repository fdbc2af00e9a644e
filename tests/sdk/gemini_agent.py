"""Google's own Python SDK (`google-genai` 3.6) through Condenser's Gemini
adapter: an agent of TURNS turns, each a user message and the function
calls the model asks for, streamed or not (STREAM), on the API version the
SDK defaults to (`v1`) or the one Gemini CLI uses (API_VERSION=v1beta).

Tools are declared, never executed by the SDK (automatic function calling
is off): the script answers each call itself and sends the model's content
back whole, thought signatures included, as Google's docs ask.

Run by tests/api/gemini.rs with CONDENSER_URL set; exits non-zero (with
the reason on stderr) when anything is not what a user expects."""
import os
import sys

from google import genai
from google.genai import errors, types

URL = os.environ["CONDENSER_URL"]
MODEL = os.environ["MODEL"]
TURNS = int(os.environ.get("TURNS", "30"))
STREAM = os.environ.get("STREAM") == "1"
VERSION = os.environ.get("API_VERSION", "v1")

client = genai.Client(api_key=os.environ.get("GEMINI_KEY", "gk-test-key"),
                      http_options=types.HttpOptions(base_url=URL, api_version=VERSION))
READ_FILE = types.FunctionDeclaration(
    name="read_file", description="Read a file",
    parameters_json_schema={"type": "object", "properties": {"path": {"type": "string"}},
                            "required": ["path"]})
CONFIG = types.GenerateContentConfig(
    system_instruction="You are a coding agent. Use tools to inspect files.",
    tools=[types.Tool(function_declarations=[READ_FILE])],
    automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))


def ask(history):
    """One request: the model's content as the client sees it."""
    if not STREAM:
        response = client.models.generate_content(model=MODEL, contents=history, config=CONFIG)
        candidate = response.candidates[0]
        assert response.usage_metadata.prompt_token_count, "the answer carries its usage"
        assert candidate.finish_reason == types.FinishReason.STOP, candidate.finish_reason
        return candidate.content
    parts, finish = [], None
    for chunk in client.models.generate_content_stream(model=MODEL, contents=history, config=CONFIG):
        assert chunk.usage_metadata and chunk.usage_metadata.prompt_token_count, "usage in every chunk"
        candidate = chunk.candidates[0]
        if candidate.content and candidate.content.parts:
            parts += candidate.content.parts
        finish = candidate.finish_reason or finish
    assert finish == types.FinishReason.STOP, f"the stream ended with {finish}"
    return types.Content(role="model", parts=parts)


def answers(content, more):
    """The user's function responses to every call in `content`."""
    responses = []
    for part in content.parts:
        if part.function_call:
            call = part.function_call
            response = types.FunctionResponse(
                id=call.id, name=call.name,
                response={"output": f"{more} contents of {call.args['path']}: " + "fn x() {} " * 60})
            responses.append(types.Part(function_response=response))
    return responses


def text_of(content):
    return "".join(part.text or "" for part in content.parts if not part.thought)


history = []
for turn in range(1, TURNS + 1):
    log = " ".join(f"line {turn}.{i}: request handled in {i * 7 % 300} ms" for i in range(40))
    history.append(types.Content(role="user", parts=[types.Part(text=f"Turn {turn}: read this log and the file. [tools]\n{log}")]))
    for round in range(3):
        try:
            content = ask(history)
        except errors.APIError as error:
            sys.exit(f"turn {turn}, round {round}: {error.code} {error.status}: {error.message}")
        history.append(content)
        calls = answers(content, "[more]" if round == 0 else "done")
        if not calls:
            break
        history.append(types.Content(role="user", parts=calls))
    assert text_of(history[-1]), f"turn {turn}: no answer"
print(f"google-genai ok: {TURNS} turns, {len(history)} contents", file=sys.stderr)
