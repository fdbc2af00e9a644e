"""The OpenAI Agents SDK's OpenAIResponsesCompactionSession through
Condenser to a Responses server that has no /responses/compact: a 12-turn
tool-using agent whose session is compacted by `client.responses.compact`
(served by Condenser) every few turns, every turn answered, then one more
request from the compacted session.

Run by tests/api/sdk.rs with CONDENSER_URL, API_KEY and MODEL set; exits
non-zero (with the reason on stderr) when anything is not what a user
expects."""
import asyncio
import os

from agents import (Agent, ModelSettings, OpenAIResponsesModel, Runner, SQLiteSession,
                    function_tool, set_tracing_disabled)
from agents.memory import OpenAIResponsesCompactionSession
from openai import AsyncOpenAI

set_tracing_disabled(True)
client = AsyncOpenAI(base_url=os.environ["CONDENSER_URL"] + "/v1", api_key=os.environ["API_KEY"], max_retries=0)
MODEL = os.environ["MODEL"]

compactions = 0
compact = client.responses.compact


async def counting_compact(**kwargs):
    global compactions
    compactions += 1
    return await compact(**kwargs)


client.responses.compact = counting_compact


@function_tool
def read_file(path: str) -> str:
    """Read a file."""
    return f"contents of {path}: " + "lorem ipsum dolor sit amet " * 40


async def main():
    agent = Agent(name="coder", instructions="You are a coding agent.", tools=[read_file],
                  model=OpenAIResponsesModel(model=MODEL, openai_client=client),
                  model_settings=ModelSettings(store=False))
    session = OpenAIResponsesCompactionSession(
        "agents-session", SQLiteSession("agents-session"), client=client, model=MODEL,
        compaction_mode="input")
    for turn in range(1, 13):
        result = await Runner.run(agent, f"Turn {turn}: inspect module {turn}. [tools]", session=session)
        assert result.final_output, f"turn {turn}: no answer"
    items = await session.get_items()
    sealed = [i for i in items if isinstance(i, dict) and i.get("type") == "compaction"]
    assert compactions >= 2, f"only {compactions} compactions"
    assert len(sealed) == 1, items
    assert sealed[0]["encrypted_content"].startswith("condenser.v1."), sealed
    # The conversation goes on from the compacted session: the next request
    # carries its compaction item, which Condenser expands into its summary,
    # so the summary written last reaches the upstream too.
    follow_up = await client.responses.create(
        model=MODEL, input=items + [{"role": "user", "content": "Turn 13: what is left to do?"}],
        store=False)
    assert follow_up.output_text, "the session went on from its compaction"


asyncio.run(main())
