"""The operator's P/D frontend: the DisaggDeployment's OpenAI endpoint for the flows vllm-router cannot drive.

Pure core (no I/O, no clock, no randomness; tested against vLLM's exact field names):
`contract` (what engine pods carry), `selection` (policies, pairing revisions, drains), `flows` (legs, order,
kv_transfer_params, headers, bodies), `conversations` (bidirectional state), `probe` (probe requests and verdicts),
`moriio` (registration payloads), `sse` (event parsing), `config`.
Thin shell: `server` (aiohttp server and leg execution), `client` (keep-alive HTTP/1.1 client for the engine
legs), `discovery` (kr8s pod watch), `registry` (MoRI-IO ZMQ registrations), `metrics` (Prometheus), `app`
(wiring). See docs/frontend.md.
"""
