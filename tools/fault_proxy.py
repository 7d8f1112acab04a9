#!/usr/bin/python3
"""An HTTP/1.1 forwarding proxy that injects the failures of object storage, for the
remote-shard tests (tests/support/object_servers.h starts it in front of nginx or s3rver).

  tools/fault_proxy.py --listen 127.0.0.1:7200 --upstream http://127.0.0.1:7100
  tools/fault_proxy.py --self-test

Requests are forwarded as sent (method, path and query, every end-to-end header with
Host unchanged because SigV4 signatures cover it, the body) over a kept-alive
connection to the upstream, and the response is streamed back. Faults are armed over
HTTP on the same port, under /__proxy/ (JSON bodies):

  POST /__proxy/faults  {"kind": "cut", "match": "part", "count": 1, "after_bytes": 100}
                        {"kind": "fail", "status": 503, "retry_after": 2, ...}
                        {"kind": "trickle", "bytes_per_second": 40000, ...}
                        {"kind": "bad_range", ...}
                        {"kind": "overlong", "extra_bytes": 1048576, ...}
  POST /__proxy/delay   {"ms": 50}          every request waits that long first
  POST /__proxy/sigv4   {"access_key_id": "AKID", "secret_access_key": "SECRET"}, or {}
  POST /__proxy/clear   faults, delay and the SigV4 check off (counts stay)
  GET  /__proxy/counts  {"requests": N, "forwarded": N, "cut": N, ...}

The store faults, for a store that misbehaves in the middle of an epoch:
  fail       answers `status` (403 expired credentials, 404 object deleted, 503...) with
             an S3 error body instead of forwarding;
  cut        sends `after_bytes` of the body, then closes the connection;
  trickle    sends the body steadily at `bytes_per_second` (slow, not stalled);
  bad_range  a malformed 206: the upstream's body, but under a Content-Range one byte
             later than the one asked for (or `content_range` verbatim, when given);
  overlong   the upstream's status and body with no Content-Length, then `extra_bytes`
             more bytes, then the end of the connection (a body longer than the object).

A request takes the first armed fault whose `match` is in its path (every path when
empty), whose `method` is the request's (any when empty), and whose count is not spent
(-1: never spent); a fault with `skip` N lets its first N such requests through
untouched ("after N requests"). Each proxied request counts in "requests" and in
exactly one kind: bad_signature, failed, cut, trickled, malformed, overlong or
forwarded. One line on stderr per fault applied. Standard library only.
"""
import argparse
import hashlib
import hmac
import http.client
import http.server
import json
import re
import socket
import sys
import threading
import time
import urllib.parse

CONTROL_PREFIX = "/__proxy/"

# Connection-level headers: they describe one hop, so they are not passed on (the
# proxy frames bodies itself, see Handler._read_body and _forward).
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "proxy-connection",
}

ERROR_CODES = {
    403: "AccessDenied",
    404: "NoSuchKey",
    500: "InternalError",
    503: "SlowDown",
}


def error_xml(code, message):
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        "<RequestId>fault-proxy</RequestId></Error>"
    ).encode()


# ---- AWS Signature Version 4, header form ---------------------------------------------

UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~")


def uri_encode(data, encode_slash=True):
    """AWS's UriEncode: every byte but the unreserved ones as %XX (upper-case hex), space
    as %20 (never '+'), '/' kept only in a path."""
    if isinstance(data, str):
        data = data.encode()
    out = []
    for b in data:
        if b in UNRESERVED or (b == ord("/") and not encode_slash):
            out.append(chr(b))
        else:
            out.append("%%%02X" % b)
    return "".join(out)


def canonical_uri(raw_path):
    """The path as S3 canonicalizes it: each segment decoded, then encoded once by AWS's
    rules. So a client that sent '$' raw and one that sent '%24' sign the same string
    (the AWS PUT example sends /test$file.text and signs /test%24file.text), and an
    encoded '/' (%2F) inside a key stays one."""
    if not raw_path:
        return "/"
    return "/".join(uri_encode(urllib.parse.unquote_to_bytes(seg)) for seg in raw_path.split("/"))


def canonical_query(raw_query):
    """Parameters decoded, re-encoded by AWS's rules, sorted by name then value; a
    parameter without '=' (?lifecycle) gets an empty value ('lifecycle=')."""
    if not raw_query:
        return ""
    pairs = []
    for item in raw_query.split("&"):
        if not item:
            continue
        name, _, value = item.partition("=")
        # unquote, not unquote_plus: AWS signers send a space as %20, so a raw '+' is a
        # '+' (and is signed as %2B).
        pairs.append(
            (
                uri_encode(urllib.parse.unquote_to_bytes(name)),
                uri_encode(urllib.parse.unquote_to_bytes(value)),
            )
        )
    pairs.sort()
    return "&".join(f"{n}={v}" for n, v in pairs)


def parse_authorization(value):
    """{'credential': [...5 parts], 'signed_headers': [...], 'signature': hex}, or None
    when `value` is not a well-formed AWS4-HMAC-SHA256 Authorization header."""
    if not value:
        return None
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != "AWS4-HMAC-SHA256":
        return None
    fields = {}
    for part in rest.split(","):
        key, _, val = part.strip().partition("=")
        fields[key] = val
    try:
        credential = fields["Credential"].split("/")
        signed = fields["SignedHeaders"].split(";")
        signature = fields["Signature"]
    except KeyError:
        return None
    if len(credential) != 5 or credential[4] != "aws4_request" or not signature:
        return None
    return {"credential": credential, "signed_headers": signed, "signature": signature}


def header_values(headers, name):
    """Every value of header `name` ((name, value) pairs, any case), in order."""
    return [v for k, v in headers if k.lower() == name]


def canonical_request(method, raw_target, headers, signed_headers, payload_hash):
    path, _, query = raw_target.partition("?")
    lines = [method, canonical_uri(path), canonical_query(query)]
    for name in signed_headers:
        # Trimmed, inner runs of spaces as one, repeated headers joined with ','.
        values = [re.sub(r"\s+", " ", v.strip()) for v in header_values(headers, name)]
        lines.append(f"{name}:{','.join(values)}")
    lines.append("")
    lines.append(";".join(signed_headers))
    lines.append(payload_hash)
    return "\n".join(lines)


def signing_key(secret, date, region, service):
    key = ("AWS4" + secret).encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def sigv4_signature(secret, method, raw_target, headers, auth, payload_hash, amz_date):
    """The signature a correct signer computes for this request, given the scope and
    signed headers its Authorization header names."""
    _, date, region, service, _ = auth["credential"]
    creq = canonical_request(method, raw_target, headers, auth["signed_headers"], payload_hash)
    string_to_sign = "\n".join(
        [
            "AWS4-HMAC-SHA256",
            amz_date,
            f"{date}/{region}/{service}/aws4_request",
            hashlib.sha256(creq.encode()).hexdigest(),
        ]
    )
    key = signing_key(secret, date, region, service)
    return hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest(), creq


def check_sigv4(creds, method, raw_target, headers, body):
    """None when the request is signed right for `creds`; else (status, code, message)."""
    auth = parse_authorization((header_values(headers, "authorization") or [""])[0])
    if auth is None:
        return 403, "SignatureDoesNotMatch", "missing or malformed AWS4-HMAC-SHA256 Authorization"
    if auth["credential"][0] != creds["access_key_id"]:
        return 403, "InvalidAccessKeyId", f"unknown access key id {auth['credential'][0]}"
    amz_date = (header_values(headers, "x-amz-date") or [""])[0].strip()
    if not amz_date.startswith(auth["credential"][1]):
        return 403, "SignatureDoesNotMatch", "x-amz-date missing or not the credential's date"
    if "host" not in auth["signed_headers"]:
        return 403, "SignatureDoesNotMatch", "host is not a signed header"
    content_sha = (header_values(headers, "x-amz-content-sha256") or [""])[0].strip()
    body_sha = hashlib.sha256(body).hexdigest()
    if re.fullmatch(r"[0-9a-fA-F]{64}", content_sha) and content_sha.lower() != body_sha:
        return 400, "XAmzContentSHA256Mismatch", "x-amz-content-sha256 is not the body's SHA-256"
    expected, creq = sigv4_signature(
        creds["secret_access_key"],
        method,
        raw_target,
        headers,
        auth,
        content_sha or body_sha,
        amz_date,
    )
    if not hmac.compare_digest(expected, auth["signature"]):
        # The canonical request in the log says what this side signed: what a failing
        # test needs to see.
        log("bad signature for %s %s; canonical request here:\n%s" % (method, raw_target, creq))
        return 403, "SignatureDoesNotMatch", "the signature is not right for these credentials"
    return None


# ---- the proxy -----------------------------------------------------------------------


def log(message):
    sys.stderr.write("fault_proxy: %s\n" % message)
    sys.stderr.flush()


class State:
    """Armed faults, delay, SigV4 credentials and counts; shared by the handler threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.faults = []
        self.delay_ms = 0
        self.sigv4 = None
        self.counts = {
            "requests": 0,
            "forwarded": 0,
            "cut": 0,
            "failed": 0,
            "trickled": 0,
            "malformed": 0,
            "overlong": 0,
            "bad_signature": 0,
        }

    def count(self, kind):
        with self.lock:
            self.counts[kind] += 1

    def take_fault(self, method, path):
        with self.lock:
            for fault in self.faults:
                if fault["count"] == 0 or fault["match"] not in path:
                    continue
                if fault["method"] and fault["method"] != method:
                    continue
                if fault["skip"] > 0:
                    fault["skip"] -= 1
                    return None  # one of the first N: through untouched
                if fault["count"] > 0:
                    fault["count"] -= 1
                return dict(fault)
        return None


FAULT_PARAMS = {
    "cut": {"after_bytes": int},
    "fail": {"status": int, "retry_after": int},
    "trickle": {"bytes_per_second": int},
    "bad_range": {"content_range": str},
    "overlong": {"extra_bytes": int},
}

# What each fault kind counts as (see the module's docstring).
FAULT_COUNTS = {
    "cut": "cut",
    "trickle": "trickled",
    "bad_range": "malformed",
    "overlong": "overlong",
}


def parse_fault(spec):
    kind = spec.get("kind")
    if kind not in FAULT_PARAMS:
        raise ValueError(f"unknown fault kind {kind!r}")
    fault = {
        "kind": kind,
        "match": str(spec.get("match", "")),
        "count": int(spec.get("count", -1)),
        "method": str(spec.get("method", "")).upper(),
        "skip": int(spec.get("skip", 0)),
    }
    for name, cast in FAULT_PARAMS[kind].items():
        if name in spec:
            fault[name] = cast(spec[name])
    fault.setdefault("retry_after", -1)
    if kind == "cut" and fault.get("after_bytes", -1) < 0:
        raise ValueError("cut needs after_bytes >= 0")
    if kind == "fail" and not 100 <= fault.get("status", 0) <= 599:
        raise ValueError("fail needs an HTTP status")
    if kind == "trickle" and fault.get("bytes_per_second", 0) <= 0:
        raise ValueError("trickle needs bytes_per_second > 0")
    if kind == "overlong":
        fault.setdefault("extra_bytes", 1 << 20)
        if fault["extra_bytes"] <= 0:
            raise ValueError("overlong needs extra_bytes > 0")
    if fault["skip"] < 0:
        raise ValueError("skip must be >= 0")
    return fault


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as clients of object storage expect
    server_version = "fault_proxy"
    state = None  # set by make_server
    upstream = None  # (host, port)

    def log_message(self, format, *args):  # one line per fault instead (see log())
        pass

    # Every method goes the same way.
    def do_GET(self):
        self._handle()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_OPTIONS = do_PATCH = do_GET

    def _read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            body = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return bytes(body)
                body += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _reply(self, status, body, content_type="application/xml", extra=()):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self):
        body = self._read_body()
        if self.path.startswith(CONTROL_PREFIX):
            self._control(body)
            return
        state = self.state
        with state.lock:
            state.counts["requests"] += 1
            delay_ms, creds = state.delay_ms, state.sigv4
        if delay_ms > 0:
            time.sleep(delay_ms / 1000.0)
        headers = list(self.headers.items())
        if creds is not None:
            problem = check_sigv4(creds, self.command, self.path, headers, body)
            if problem is not None:
                status, code, message = problem
                state.count("bad_signature")
                log(f"bad_signature {self.command} {self.path}: {code}: {message}")
                self._reply(status, error_xml(code, message))
                return
        fault = state.take_fault(self.command, self.path.partition("?")[0])
        if fault is not None and fault["kind"] == "fail":
            state.count("failed")
            log(f"fail {self.command} {self.path}: {fault['status']}")
            extra = []
            if fault["retry_after"] >= 0:
                extra.append(("Retry-After", str(fault["retry_after"])))
            code = ERROR_CODES.get(fault["status"], "InternalError")
            self._reply(fault["status"], error_xml(code, "injected by fault_proxy"), extra=extra)
            return
        self._forward(body, headers, fault)

    def _upstream_response(self, body, headers):
        """Sends the request upstream on this connection's kept-alive upstream
        connection (a new one when it was closed under us) and returns the response."""
        for attempt in range(2):
            conn = getattr(self, "_conn", None)
            fresh = conn is None
            if fresh:
                conn = http.client.HTTPConnection(*self.upstream, timeout=60)
                self._conn = conn
            try:
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for name, value in headers:
                    if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                        conn.putheader(name, value)
                if body or self.command in ("PUT", "POST", "PATCH"):
                    conn.putheader("Content-Length", str(len(body)))
                conn.endheaders(body if body else None)
                return conn.getresponse()
            except (ConnectionError, http.client.HTTPException, OSError):
                conn.close()
                self._conn = None
                if fresh or attempt == 1:
                    raise
        raise AssertionError("unreachable")

    def _forward(self, body, headers, fault):
        try:
            resp = self._upstream_response(body, headers)
        except (ConnectionError, http.client.HTTPException, OSError) as e:
            self.state.count("forwarded")
            self._reply(502, error_xml("BadGateway", f"upstream: {e}"))
            return
        length = resp.getheader("Content-Length")
        no_body = self.command == "HEAD" or resp.status in (204, 304) or 100 <= resp.status < 200
        prefetched = None
        if length is None and not no_body:
            # A chunked (or close-delimited) upstream body: read it whole so that the
            # client gets a Content-Length, which cuts are measured against.
            prefetched = resp.read()
            length = str(len(prefetched))
        kind = fault["kind"] if fault else "forwarded"
        status, reason = resp.status, resp.reason
        if kind == "bad_range" and not no_body:
            status, reason = 206, "Partial Content"
        overlong = kind == "overlong" and not no_body
        self.send_response_only(status, reason)
        for name, value in resp.getheaders():
            lower = name.lower()
            if lower in HOP_BY_HOP or lower == "content-length":
                continue
            if kind == "bad_range" and lower == "content-range":
                continue
            self.send_header(name, value)
        if kind == "bad_range" and not no_body:
            self.send_header("Content-Range", self._bad_content_range(fault, resp, length))
        if overlong:
            # No length: the body is delimited by the end of the connection, so the
            # client cannot know it is longer than the object until the bytes come.
            self.send_header("Connection", "close")
            self.close_connection = True
        elif length is not None:
            self.send_header("Content-Length", length)
        if resp.will_close and not overlong:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()

        self.state.count(FAULT_COUNTS.get(kind, "forwarded"))
        if kind == "cut":
            log(f"cut {self.command} {self.path} after {fault['after_bytes']} of {length} bytes")
        elif kind == "trickle":
            log(f"trickle {self.command} {self.path} at {fault['bytes_per_second']} B/s")
        elif kind in ("bad_range", "overlong"):
            log(f"{kind} {self.command} {self.path}")

        remaining = fault["after_bytes"] if kind == "cut" else None
        rate = fault["bytes_per_second"] if kind == "trickle" else None
        # Small pieces when trickling: 20 a second, so the pace is even.
        piece = max(1, rate // 20) if rate else 64 * 1024
        start = time.monotonic()
        sent = 0
        try:
            source = [prefetched] if prefetched is not None else iter(lambda: resp.read(piece), b"")
            for chunk in [] if no_body else source:
                for i in range(0, len(chunk), piece):
                    part = chunk[i : i + piece]
                    if remaining is not None:
                        part = part[:remaining]
                        remaining -= len(part)
                    if rate:
                        wait = start + sent / rate - time.monotonic()
                        if wait > 0:
                            time.sleep(wait)
                    self.wfile.write(part)
                    sent += len(part)
                    if remaining == 0:
                        break
                if remaining == 0:
                    break
            if overlong:
                junk = b"\xa5" * min(fault["extra_bytes"], 64 * 1024)
                left = fault["extra_bytes"]
                while left > 0:
                    self.wfile.write(junk[:left])
                    left -= len(junk[:left])
            self.wfile.flush()
        except (ConnectionError, OSError):
            self.close_connection = True
            self._drop_upstream()
            return
        if remaining is not None or overlong:
            # Fewer bytes than the Content-Length, then the end of the stream (FIN): the
            # client sees a short body (curl: error 18, CURLE_PARTIAL_FILE). The rest of
            # the upstream body was not read, so that connection cannot be reused.
            self._drop_upstream()
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _bad_content_range(self, fault, resp, length):
        """The Content-Range of a malformed 206: `content_range` as given, else the
        upstream's range (or the whole body's) one byte later than the bytes sent."""
        if fault.get("content_range"):
            return fault["content_range"]
        match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+|\*)", resp.getheader("Content-Range") or "")
        if match:
            first, last, total = int(match.group(1)), int(match.group(2)), match.group(3)
        else:
            first, last, total = 0, max(int(length or 0) - 1, 0), length or "*"
        return f"bytes {first + 1}-{last + 1}/{total}"

    def _drop_upstream(self):
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()
            self._conn = None

    def _control(self, body):
        state = self.state
        action = self.path[len(CONTROL_PREFIX) :]
        try:
            spec = json.loads(body or b"{}")
            if self.command == "GET" and action == "counts":
                with state.lock:
                    reply = dict(state.counts)
                self._reply(200, json.dumps(reply).encode(), "application/json")
                return
            if self.command != "POST":
                raise ValueError(f"{self.command} {self.path}")
            with state.lock:
                if action == "faults":
                    state.faults.append(parse_fault(spec))
                elif action == "delay":
                    state.delay_ms = int(spec.get("ms", 0))
                elif action == "sigv4":
                    if spec.get("access_key_id"):
                        state.sigv4 = {
                            "access_key_id": str(spec["access_key_id"]),
                            "secret_access_key": str(spec["secret_access_key"]),
                        }
                    else:
                        state.sigv4 = None
                elif action == "clear":
                    state.faults.clear()
                    state.delay_ms = 0
                    state.sigv4 = None
                else:
                    raise ValueError(f"unknown control path {self.path}")
        except (ValueError, KeyError, TypeError) as e:
            self._reply(400, json.dumps({"error": str(e)}).encode(), "application/json")
            return
        self._reply(200, b'{"ok": true}', "application/json")


def make_server(listen_host, listen_port, upstream_url):
    parsed = urllib.parse.urlsplit(upstream_url)
    if parsed.scheme != "http" or not parsed.hostname:
        raise SystemExit(f"--upstream must be http://HOST:PORT, not {upstream_url}")
    handler = type(
        "BoundHandler",
        (Handler,),
        {"state": State(), "upstream": (parsed.hostname, parsed.port or 80)},
    )
    # A listen backlog for a client's whole connection pool opening at once (the
    # default 5 drops SYNs: connects then wait a second for the retransmission).
    server_class = type("Server", (http.server.ThreadingHTTPServer,), {"request_queue_size": 128})
    server = server_class((listen_host, listen_port), handler)
    server.daemon_threads = True
    return server


# ---- self-test: AWS's published S3 examples --------------------------------------------


def self_test():
    """The verifier against the examples of the AWS S3 API reference, "Signature
    Calculations for the Authorization Header: Transferring Payload in a Single Chunk"."""
    creds = {
        "access_key_id": "AKIAIOSFODNN7EXAMPLE",
        "secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    }
    empty = hashlib.sha256(b"").hexdigest()
    host = ("Host", "examplebucket.s3.amazonaws.com")
    date = ("x-amz-date", "20130524T000000Z")

    def auth(signed, signature):
        return (
            "Authorization",
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/"
            f"us-east-1/s3/aws4_request,SignedHeaders={signed},Signature={signature}",
        )

    put_body = b"Welcome to Amazon S3."
    cases = [
        (
            "GET Object",
            "GET",
            "/test.txt",
            [
                host,
                ("Range", "bytes=0-9"),
                ("x-amz-content-sha256", empty),
                date,
                auth(
                    "host;range;x-amz-content-sha256;x-amz-date",
                    "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
                ),
            ],
            b"",
        ),
        (
            "PUT Object",
            "PUT",
            "/test$file.text",
            [
                host,
                ("Date", "Fri, 24 May 2013 00:00:00 GMT"),
                date,
                ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
                ("x-amz-content-sha256", hashlib.sha256(put_body).hexdigest()),
                auth(
                    "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
                    "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd",
                ),
            ],
            put_body,
        ),
        (
            "GET Bucket Lifecycle",
            "GET",
            "/?lifecycle",
            [
                host,
                ("x-amz-content-sha256", empty),
                date,
                auth(
                    "host;x-amz-content-sha256;x-amz-date",
                    "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543",
                ),
            ],
            b"",
        ),
        (
            "Get Bucket (List Objects)",
            "GET",
            "/?max-keys=2&prefix=J",
            [
                host,
                ("x-amz-content-sha256", empty),
                date,
                auth(
                    "host;x-amz-content-sha256;x-amz-date",
                    "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7",
                ),
            ],
            b"",
        ),
    ]
    global log

    def log(message):  # the rejections below are expected
        pass

    failures = 0
    for name, method, target, headers, body in cases:
        if check_sigv4(creds, method, target, headers, body) is not None:
            print(f"FAIL: AWS example {name!r} rejected")
            failures += 1
    # The same requests made different (another parameter order is the same request;
    # another value, key or method is not).
    list_headers = cases[3][3]
    variants = [
        ("query in another order", "GET", "/?prefix=J&max-keys=2", list_headers, b"", True),
        ("query value percent-encoded", "GET", "/?prefix=%4A&max-keys=2", list_headers, b"", True),
        ("another query value", "GET", "/?max-keys=3&prefix=J", list_headers, b"", False),
        ("another path", "GET", "/test.txt2", cases[0][3], b"", False),
        ("another method", "HEAD", "/test.txt", cases[0][3], b"", False),
        ("another body", "PUT", "/test$file.text", cases[1][3], b"Welcome to Amazon S4.", False),
        ("no signature", "GET", "/test.txt", cases[0][3][:-1], b"", False),
    ]
    for name, method, target, headers, body, ok in variants:
        if (check_sigv4(creds, method, target, headers, body) is None) != ok:
            print(f"FAIL: {name}: expected {'accepted' if ok else 'rejected'}")
            failures += 1
    checks = [
        (uri_encode("a b/c~d+é", encode_slash=False), "a%20b/c~d%2B%C3%A9"),
        (canonical_uri("/test$file.text"), "/test%24file.text"),
        (canonical_uri("/b/a%2Fb"), "/b/a%2Fb"),
        (
            canonical_query("list-type=2&prefix=a%2F&delimiter=%2F"),
            "delimiter=%2F&list-type=2&prefix=a%2F",
        ),
        (canonical_query("lifecycle"), "lifecycle="),
    ]
    for got, want in checks:
        if got != want:
            print(f"FAIL: {got!r} != {want!r}")
            failures += 1
    # Which request takes a store fault: by path, method, after `skip`, for `count`.
    state = State()
    state.faults.append(
        parse_fault(
            {
                "kind": "fail",
                "status": 404,
                "match": "shard-1",
                "method": "get",
                "skip": 2,
                "count": 2,
            }
        )
    )
    state.faults.append(parse_fault({"kind": "overlong", "match": "shard-2"}))
    taken = [
        (f or {}).get("kind")
        for f in (
            state.take_fault("HEAD", "/d/shard-1.tar"),
            state.take_fault("GET", "/d/shard-1.tar"),
            state.take_fault("GET", "/d/shard-1.tar"),
            state.take_fault("GET", "/d/shard-1.tar"),
            state.take_fault("GET", "/d/shard-1.tar"),
            state.take_fault("GET", "/d/shard-1.tar"),
            state.take_fault("GET", "/d/shard-2.tar"),
        )
    ]
    if taken != [None, None, None, "fail", "fail", None, "overlong"]:
        print(f"FAIL: faults taken {taken}")
        failures += 1
    if state.faults[1]["extra_bytes"] != 1 << 20:
        print("FAIL: overlong's default extra_bytes")
        failures += 1
    for bad in (
        {"kind": "overlong", "extra_bytes": 0},
        {"kind": "fail", "status": 404, "skip": -1},
        {"kind": "nonsense"},
    ):
        try:
            parse_fault(bad)
            print(f"FAIL: {bad} accepted")
            failures += 1
        except ValueError:
            pass
    print("fault_proxy self-test: %s" % ("ok" if failures == 0 else f"{failures} failed"))
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT")
    parser.add_argument("--upstream", help="http://HOST:PORT")
    parser.add_argument(
        "--self-test",
        action="store_true",
        help="check the SigV4 verifier against AWS's examples and exit",
    )
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if not args.upstream:
        parser.error("--upstream is required")
    host, _, port = args.listen.rpartition(":")
    server = make_server(host, int(port), args.upstream)
    print("listening on %s:%d" % server.server_address[:2], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
