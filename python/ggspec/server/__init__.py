"""`ggspec serve`: an OpenAI-compatible HTTP server over one Engine (the server
extra: FastAPI, uvicorn, prometheus_client). protocol: the request bodies;
responses: OpenAI's shapes and llama-server's timings; service: the model, the
engine and the requests in flight; app: the routes; main: the process."""
