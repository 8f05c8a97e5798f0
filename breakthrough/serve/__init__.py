"""`bt serve`: the local MLX engine behind vLLM's OpenAI-compatible API, for bt's own client
(`bt base|continue --backend vllm --endpoint A,B`: several Macs form a fleet with no other
software) and for ordinary OpenAI / vLLM clients. An application on top of `engine/`, which
never imports it.

    app.py         the command: options and socket checked before the model loads, uvicorn
    auth.py        loopback by default; --allow-remote with an API key; the bearer check
    generation.py  the generation thread: one long MlxEngine.generate fed by the HTTP queue
    parse.py       request bodies read into work, or a 400 naming the field
    stops.py       stop strings: token-id stop sequences, and the cut by text
    render.py      vLLM's completion and chat-completion objects (+ bt's extras)
    routes.py      the starlette routes, limits (413, 429, 499), the request log
    errors.py      the error answers' JSON shape
"""
