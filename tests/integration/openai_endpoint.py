"""A local OpenAI-compatible ``chat.completions`` endpoint for tests: ``answer(body)`` gives
the reply message for a request body, or None for an HTTP 500."""

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer


@contextlib.contextmanager
def serve(answer):
    """Serve ``answer`` on a free port; yields the ``.../v1`` base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            message = answer(body)
            if message is None:
                self.send_response(500)
                self.end_headers()
                return
            reply = {"id": "x", "object": "chat.completion", "created": 0,
                     "model": body["model"], "choices": [
                         {"index": 0, "finish_reason": "stop", "message": message}]}
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        server.shutdown()
