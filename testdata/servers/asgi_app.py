"""An ASGI application for realservers_test.go (TestRealHypercorn).

Usage: hypercorn -w 1 testdata/servers/asgi_app.py:app

Paths are /<kind>/<id>:
  get, post  answer the id (body and X-Id, with Content-Length)
  slow       answer the id after 30 ms
  big        answer the id padded with dots to 64 KiB
Every POST id is counted (in memory: run one worker); GET /counts answers
the counts as JSON.

hypercorn 0.13 closes a connection after its first answer, without saying
so, when that answer came before it parsed the end of the request: a GET
answered at once (not a slow one, nor a POST, whose body is read first).
"""
import asyncio
import json

BIG = 64 << 10
posts = {}


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    # Only a POST's body is read. A GET is answered without waiting for
    # the end of its request, as most frameworks do, and so usually before
    # hypercorn has parsed that end: it then closes the connection after
    # the answer (without saying so) rather than keep it.
    more = scope["method"] == "POST"
    while more:
        message = await receive()
        more = message.get("more_body", False)
    path = scope["path"]
    status, headers = 200, []
    if path == "/counts":
        body = json.dumps(posts)
    else:
        kind, _, id_ = path.lstrip("/").partition("/")
        if scope["method"] == "POST":
            posts[id_] = posts.get(id_, 0) + 1
        headers.append((b"x-id", id_.encode()))
        body = id_
        if kind == "slow":
            await asyncio.sleep(0.03)
        elif kind == "big":
            body = id_ + "." * (BIG - len(id_))
        elif kind not in ("get", "post"):
            status, body = 404, "not found"
    data = body.encode()
    headers += [(b"content-type", b"text/plain"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
