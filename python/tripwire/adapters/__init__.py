"""Drop-in adapters: hand a guard what the harness already has (an SDK's response), get back
which calls to run and, once their results are in, every tool result to send.

- ``tripwire.adapters.openai``: Chat Completions (``tool_calls``) and Responses
  (``function_call`` items); ``pip install 'tripwire[openai]'``.
- ``tripwire.adapters.anthropic``: Messages (``tool_use`` blocks);
  ``pip install 'tripwire[anthropic]'``.

They need no client and make no request: they read the SDK's objects (or their dicts) and
build the SDK's own request shapes. The decisions are the guard's (``Guard.check_turn``,
``Guard.observe``); an adapter only translates.
"""
