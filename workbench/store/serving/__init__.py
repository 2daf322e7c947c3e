"""LLM serving at token level: per-request serving records (vLLM bench, AIPerf, OTLP spans),
the engine steps of a serving trace, and the token model that joins them (DESIGN §4 requests,
issue 35): TTFT, inter-token gaps and TPOT per request, each gap split into the five stages.
Imports numpy, pyarrow, msgspec and workbench.store only; never textual."""
