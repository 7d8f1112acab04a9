#!/usr/bin/python3
"""A tiny S3 store (path style, ListObjectsV2, GET with Range, HEAD) serving a
directory, with fault modes a real store shows only when it misbehaves: listings that
never end or repeat a key, GETs that fail with a status, bodies sent at a trickle,
ETags that are not the content's MD5. For the remote indexing tests (issue 35); no
dependency outside Python's standard library.

    hostile_s3.py --dir DIR --bucket B --port-file F [--faults FAULTS.json]

Objects are the regular files under DIR, keyed by their path relative to it. The
listening port (127.0.0.1, chosen by the kernel) is written to F once the server
accepts. FAULTS.json is read again on every request, so a test changes the store's
behaviour by rewriting it (atomically: write a temporary file and rename). Its keys,
all optional:

    "list_loop": true           every listing page is truncated with the same token
    "list_duplicate": true      each page after the first repeats the previous page's
                                last key
    "fail": {"SUBSTR": STATUS}  GET and HEAD of keys containing SUBSTR answer STATUS
                                with an S3 error document
    "trickle": {"SUBSTR": N}    GET bodies of keys containing SUBSTR are sent at N
                                bytes per second (in pieces of 1/20 s)
    "etag": "md5"|"other"|"none"  the ETag sent: the content's MD5 (single-part S3,
                                the default), a digest that is not the MD5 (as nginx or
                                a multipart upload), or none

GET /__hostile/requests answers a JSON object: request path (no query) -> count.
"""

import argparse
import base64
import hashlib
import http.server
import json
import os
import socketserver
import sys
import threading
import time
import urllib.parse
from xml.sax.saxutils import escape

_counts = {}
_counts_lock = threading.Lock()


def _faults(path):
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def _etag(data, mode):
    if mode == "none":
        return None
    digest = hashlib.md5(data).hexdigest()
    if mode == "other":
        return '"%s-1"' % digest  # a multipart upload's form: not the content's MD5
    return '"%s"' % digest


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hostile_s3"

    def log_message(self, fmt, *args):  # to stderr, one line each
        sys.stderr.write("%s %s\n" % (self.command, fmt % args))

    # ---- plumbing ----

    def _send(self, status, body=b"", headers=None, content_type="application/xml"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status, code, message):
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code>'
            "<Message>%s</Message></Error>" % (escape(code), escape(message))
        )
        self._send(status, body.encode())

    def _split(self):
        url = urllib.parse.urlsplit(self.path)
        parts = urllib.parse.unquote(url.path).lstrip("/").split("/", 1)
        bucket = parts[0]
        key = parts[1] if len(parts) > 1 else ""
        return url.path, bucket, key, urllib.parse.parse_qs(url.query, keep_blank_values=True)

    # ---- requests ----

    def do_GET(self):
        self._handle()

    def do_HEAD(self):
        self._handle()

    def _handle(self):
        raw_path, bucket, key, query = self._split()
        if raw_path == "/__hostile/requests":
            with _counts_lock:
                body = json.dumps(_counts).encode()
            self._send(200, body, content_type="application/json")
            return
        with _counts_lock:
            _counts[raw_path] = _counts.get(raw_path, 0) + 1
        faults = _faults(self.server.faults_path)
        if bucket != self.server.bucket:
            self._error(404, "NoSuchBucket", "The specified bucket does not exist")
            return
        if not key:
            self._list(query, faults)
            return
        for substr, status in faults.get("fail", {}).items():
            if substr in key:
                self._error(
                    int(status),
                    "InternalError" if int(status) >= 500 else "AccessDenied",
                    "hostile_s3 fails %s" % key,
                )
                return
        path = os.path.join(self.server.root, key)
        if ".." in key.split("/") or not os.path.isfile(path):
            self._error(404, "NoSuchKey", "The specified key does not exist.")
            return
        with open(path, "rb") as f:
            data = f.read()
        etag = _etag(data, faults.get("etag", "md5"))
        if_match = self.headers.get("If-Match")
        if if_match is not None and etag is not None and if_match != etag:
            self._error(412, "PreconditionFailed", "At least one of the pre-conditions failed")
            return
        headers = {"Accept-Ranges": "bytes"}
        if etag is not None:
            headers["ETag"] = etag
        status = 200
        body = data
        spec = self.headers.get("Range")
        if spec and spec.startswith("bytes="):
            first, _, last = spec[len("bytes=") :].partition("-")
            start = int(first)
            end = min(int(last), len(data) - 1) if last else len(data) - 1
            if start >= len(data):
                self._error(416, "InvalidRange", "The requested range is not satisfiable")
                return
            body = data[start : end + 1]
            status = 206
            headers["Content-Range"] = "bytes %d-%d/%d" % (start, end, len(data))
        rate = next((int(n) for s, n in faults.get("trickle", {}).items() if s in key), 0)
        if rate <= 0 or self.command == "HEAD":
            self._send(status, body, headers, content_type="application/octet-stream")
            return
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        piece = max(1, rate // 20)
        for i in range(0, len(body), piece):
            self.wfile.write(body[i : i + piece])
            self.wfile.flush()
            time.sleep(0.05)

    def _list(self, query, faults):
        prefix = query.get("prefix", [""])[0]
        max_keys = int(query.get("max-keys", ["1000"])[0])
        token = query.get("continuation-token", [None])[0]
        keys = []
        for dirpath, _, files in os.walk(self.server.root):
            for name in files:
                key = os.path.relpath(os.path.join(dirpath, name), self.server.root)
                if key.startswith(prefix) and "/" not in key[len(prefix) :]:
                    keys.append(key)
        keys.sort()
        start = 0
        if token is not None and not faults.get("list_loop"):
            try:
                start = int(base64.urlsafe_b64decode(token.encode()).decode())
            except ValueError:
                self._error(400, "InvalidArgument", "bad continuation token")
                return
        page = keys[start : start + max_keys]
        if faults.get("list_duplicate") and start > 0:
            page = [keys[start - 1]] + page  # the previous page's last key, again
        end = start + max_keys
        truncated = end < len(keys)
        next_token = base64.urlsafe_b64encode(str(end).encode()).decode()
        if faults.get("list_loop"):
            truncated = True
            next_token = "the-same-token"
        parts = [
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
            "<Name>%s</Name><Prefix>%s</Prefix><KeyCount>%d</KeyCount>"
            "<MaxKeys>%d</MaxKeys><IsTruncated>%s</IsTruncated>"
            % (
                escape(self.server.bucket),
                escape(prefix),
                len(page),
                max_keys,
                "true" if truncated else "false",
            ),
        ]
        if truncated:
            parts.append("<NextContinuationToken>%s</NextContinuationToken>" % escape(next_token))
        for key in page:
            path = os.path.join(self.server.root, key)
            with open(path, "rb") as f:
                data = f.read()
            etag = _etag(data, faults.get("etag", "md5"))
            parts.append(
                "<Contents><Key>%s</Key><Size>%d</Size>%s<StorageClass>STANDARD"
                "</StorageClass></Contents>"
                % (
                    escape(key),
                    len(data),
                    "<ETag>%s</ETag>" % escape(etag, {'"': "&quot;"}) if etag else "",
                )
            )
        parts.append("</ListBucketResult>")
        self._send(200, "".join(parts).encode())


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", required=True, help="the bucket's objects")
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--port-file", required=True, help="where to write the port")
    parser.add_argument("--faults", default="", help="JSON file of faults, read per request")
    args = parser.parse_args()
    server = Server(("127.0.0.1", 0), Handler)
    server.root = os.path.abspath(args.dir)
    server.bucket = args.bucket
    server.faults_path = args.faults
    tmp = args.port_file + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(str(server.server_address[1]))
    os.rename(tmp, args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
