"""Plain HTTP requests to a test server, for what the openai client would not send."""

import http.client
import json

KEY = "test-key"  # the API key the test servers are started with


def request_json(server, method, path, body=b"", headers=None):
    """``(status, parsed JSON body)`` of one request to ``server`` (a ``ServerThread``), with ``KEY`` as its bearer
    token unless ``headers`` say otherwise (``None`` drops a header)."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=120)
    hdrs = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json", **(headers or {})}
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    conn.request(method, path, body=body, headers={k: v for k, v in hdrs.items() if v is not None})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, json.loads(data)
