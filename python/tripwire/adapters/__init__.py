"""Drop-in adapters: hand a guard what the harness already has (an SDK's response), get back
which calls to run and, once their results are in, every tool result to send.

- ``tripwire.adapters.openai``: Chat Completions (``tool_calls``) and Responses
  (``function_call`` items); ``pip install 'tripwire[openai]'``.
- ``tripwire.adapters.anthropic``: Messages (``tool_use`` blocks);
  ``pip install 'tripwire[anthropic]'``.

Where a framework owns the loop, the adapter goes where it lets code in:

- ``tripwire.adapters.agents``: the OpenAI Agents SDK, a tool input guardrail on every tool
  of an agent (``guard_agent``); ``pip install 'tripwire[agents]'``.
- ``tripwire.adapters.langchain``: LangChain v1's ``create_agent``, an ``AgentMiddleware``
  whose guard lives in the agent's state; ``pip install 'tripwire[langchain]'``.
- ``tripwire.adapters.mcp``: a guard in front of an MCP ``ClientSession.call_tool``, with
  policies from the server's tool annotations; ``pip install 'tripwire[mcp]'``.
- ``tripwire.adapters.claude_agent``: the Claude Agent SDK, its hooks
  (``ClaudeAgentOptions(hooks=claude_agent.hooks(Guard()))``), the protocol of
  ``tripwire hook claude-code`` in process; ``pip install 'tripwire[claude]'``.

Each nudge and stop they get is emitted by ``tripwire.telemetry`` where OpenTelemetry is
installed.

They need no client and make no request: they read the SDK's objects (or their dicts) and
build the SDK's own request shapes. The decisions are the guard's (``Guard.check_turn``,
``Guard.observe``); an adapter only translates.
"""
