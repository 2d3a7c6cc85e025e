"""pygls protocol with the JSON-RPC guarantees the server needs that pygls 2.1.1 lacks.

- A request whose params do not structure (e.g. an unknown triggerKind) is dropped by pygls: the
  object hook raises inside `json.loads` and the read loop only logs it. Here such a request becomes
  an `InvalidRequest` marker that is answered with -32602, so every request gets a response.
- Requests after `shutdown` are answered with -32600 instead of being ignored.
- A custom or unknown request may omit `params` (JSON-RPC 2.0); pygls would answer -32602.
- A notification method sent with an id (a request) is answered with -32600; pygls would drop the
  id and handle it as a notification, leaving the request unanswered.
- An error response to a request with `"id": null` keeps `"id": null` (pygls's converter drops it).
- `$/cancelRequest` for an already answered request is normal editor traffic: debug, not warning.
- Position encoding: utf-8 is chosen whenever the client offers it, else pygls's choice (utf-16).
- pygls files the future of every generator-, coroutine- or thread-run notification handler under a
  fresh uuid in `_request_futures` and never removes it (~1 KB per keystroke, for ever); here it is
  removed when the handler is done.
- Document sync notifications go to the server's own handlers only (its documents live in
  `codespec.context.Document`); pygls's workspace copy is not kept.

This is the one module that touches pygls's private attributes (listed in PYGLS_INTERNALS; each is
exercised by behaviour through the real server in tests/lsp/test_pygls_internals.py, so an upgrade that
moves or changes one fails loudly there, not in an editor).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import attrs
from cattrs import transform_error
from cattrs.errors import ClassValidationError
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcInvalidRequest
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import JsonRPCRequestMessage
from pygls.protocol.language_server import lsp_method

logger = logging.getLogger(__name__)

# pygls 2.1.1 internals used here: (class, attribute).
PYGLS_INTERNALS = (
    ("protocol", "_shutdown"),
    ("protocol", "_request_futures"),
    ("protocol", "_converter"),
    ("protocol", "_send_response"),
    ("protocol", "_serialize_message"),
    ("protocol", "_execute_handler"),
    ("protocol", "_check_handler_result"),
    ("protocol", "_handle_cancel_notification"),
    ("server", "_stop_event"),
    ("server", "_thread_pool"),
    ("server", "_server"),
)


@attrs.define
class InvalidRequest:
    """A request that could not be structured; answered with `error` by `handle_message`."""

    id: Any
    method: str
    error: JsonRpcException
    jsonrpc: str = "2.0"


class CodespecProtocol(LanguageServerProtocol):
    # `codespec serve --record FILE`: a codespec.sessions.record.SessionRecorder that sees every client message.
    recorder: Any = None

    def structure_message(self, data: dict[str, Any]):
        if self.recorder is not None:
            self.recorder.record(data)
        if not (_is_request(data) and "jsonrpc" in data):
            return super().structure_message(data)
        request_type = self.get_message_type(data["method"]) or JsonRPCRequestMessage
        if request_type is JsonRPCRequestMessage and "params" not in data:
            data = {**data, "params": None}  # JSON-RPC 2.0: params may be omitted (codespec/stats)
        if attrs.has(request_type) and "id" not in attrs.fields_dict(request_type):
            # A notification method sent with an id is a request nobody handles: answer it, once.
            error = JsonRpcInvalidRequest(f"{data['method']} is a notification; it must not have an id")
            return InvalidRequest(id=data["id"], method=data["method"], error=error)
        try:
            return self._converter.structure(data, request_type)
        except (ClassValidationError, ValueError, TypeError, KeyError) as exc:
            return InvalidRequest(id=data["id"], method=data["method"], error=invalid_params(exc))

    def handle_message(self, message: Any):
        if isinstance(message, InvalidRequest):
            logger.warning("invalid request %s (id %r): answered %d", message.method, message.id, message.error.code)
            self._send_response(message.id, error=message.error.to_response_error())
            return
        method = getattr(message, "method", None)
        if self._shutdown and method not in (None, types.EXIT) and hasattr(message, "id"):
            error = JsonRpcInvalidRequest("server is shut down")
            self._send_response(message.id, error=error.to_response_error())
            return
        super().handle_message(message)

    @property
    def shutdown_requested(self) -> bool:
        """The client sent `shutdown`."""
        return bool(self._shutdown)

    @property
    def requests_in_flight(self) -> int:
        """Handlers pygls holds a future for (a leak would show here first)."""
        return len(self._request_futures)

    def _serialize_message(self, data: Any) -> Any:
        out = super()._serialize_message(data)
        if isinstance(out, dict) and "error" in out and "id" not in out and getattr(data, "id", 0) is None:
            out = {**out, "id": None}  # JSON-RPC: an error response always has an id, null if unknown
        return out

    def _execute_handler(self, msg_id, handler, callback, args=None, kwargs=None):
        super()._execute_handler(msg_id, handler, callback, args, kwargs)
        if callback != self._check_handler_result:  # a request: its response callback pops it
            return
        future = self._request_futures.get(msg_id)
        if future is not None:
            future.add_done_callback(lambda _done: self._request_futures.pop(msg_id, None))

    def _handle_cancel_notification(self, msg_id: Any):
        future = self._request_futures.pop(msg_id, None)
        if future is None:
            logger.debug("cancel for finished or unknown request %r", msg_id)
            return
        future.cancel()

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams):
        general = params.capabilities.general
        offered = (general.position_encodings or []) if general else []
        if types.PositionEncodingKind.Utf8 in offered:
            general.position_encodings = [types.PositionEncodingKind.Utf8]
        return (yield from super().lsp_initialize(params))

    # Sync notifications: only the user handlers (see module docstring).
    def _user_handler_only(self, method: str, params: Any):
        if (handler := self.fm.features.get(method)) is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams):
        yield from self._user_handler_only(types.TEXT_DOCUMENT_DID_OPEN, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        yield from self._user_handler_only(types.TEXT_DOCUMENT_DID_CHANGE, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams):
        yield from self._user_handler_only(types.TEXT_DOCUMENT_DID_CLOSE, params)


def invalid_params(exc: Exception) -> JsonRpcInvalidParams:
    """-32602 with a readable reason ("$.context.triggerKind: invalid value ...")."""
    if isinstance(exc, ClassValidationError):
        reasons = "; ".join(transform_error(exc, path="$")[:3])
    else:
        reasons = str(exc)
    return JsonRpcInvalidParams(message=f"Invalid params: {reasons}")


def _is_request(data: Any) -> bool:
    return isinstance(data, dict) and "id" in data and isinstance(data.get("method"), str)


def start_reading(server: Any) -> None:
    """A fresh stop flag for a read loop of our own (what pygls's start_io sets up)."""
    server._stop_event = threading.Event()


def reading_stopped(server: Any) -> bool:
    return server._stop_event is not None and server._stop_event.is_set()


def release_server(server: Any) -> None:
    """Stop the read loop, the handler thread pool and a TCP listener, never waiting for a thread."""
    if server._stop_event is not None:
        server._stop_event.set()
    if server._thread_pool is not None:
        server._thread_pool.shutdown(wait=False, cancel_futures=True)
    if server._server is not None:
        server._server.close()
