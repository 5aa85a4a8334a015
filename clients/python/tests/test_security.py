"""Transport security of the Python client: no bearer token over plain
http unless asked for, no guessing at a mistyped scheme, and TLS with a
client certificate against a real fenced."""

import http.server
import os
import shutil
import ssl
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

from fenced import Client, FencedError  # noqa: E402

from tests.harness import Cluster, make_tls  # noqa: E402


class _Recorder:
    """An HTTP server that answers 200 {} and remembers each request's
    path and Authorization header."""

    def __init__(self):
        self.seen = []
        rec = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _any(self):
                n = int(self.headers.get("Content-Length", 0) or 0)
                if n:
                    self.rfile.read(n)
                rec.seen.append((self.path, self.headers.get("Authorization")))
                body = b'{"state":"Leader"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.addr = "127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class EndpointRulesTest(unittest.TestCase):
    def setUp(self):
        self.rec = _Recorder()
        self.addCleanup(self.rec.close)

    def test_a_mistyped_scheme_is_an_error_naming_it(self):
        for typo in ["htps", "htttp", "ftp", "tcp", "hxxp"]:
            with self.subTest(scheme=typo):
                with self.assertRaises(ValueError) as err:
                    Client(["%s://%s" % (typo, self.rec.addr)], timeout=1)
                self.assertIn(repr(typo), str(err.exception))
        self.assertEqual(self.rec.seen, [], "a request went out over a mistyped scheme")

    def test_an_endpoint_that_is_neither_host_port_nor_a_url_is_an_error(self):
        for bad in ["htps:/" + self.rec.addr, "http//" + self.rec.addr, "127.0.0.1:port", "https://", "http:///v1"]:
            with self.subTest(endpoint=bad):
                with self.assertRaises(ValueError):
                    Client([bad], timeout=1)
        self.assertEqual(self.rec.seen, [])

    def test_no_bearer_token_over_plain_http(self):
        for ep in ["10.1.2.3:7700", "http://10.1.2.3:7700", "HTTP://fenced.example:7700", "http://[2001:db8::1]:7700"]:
            with self.subTest(endpoint=ep):
                with self.assertRaises(ValueError) as err:
                    Client([ep], token="s3cret", timeout=1)
                self.assertIn("insecure=True", str(err.exception))
                self.assertNotIn("s3cret", str(err.exception))
        # One plain endpoint among https ones is enough to refuse.
        with self.assertRaises(ValueError):
            Client(["https://127.0.0.1:1", "http://10.1.2.3:7700"], token="s3cret", timeout=1)
        self.assertEqual(self.rec.seen, [], "the token was sent in clear")

    def test_a_loopback_node_takes_the_token_over_http(self):
        # A development node on this machine: the token leaves no host, as
        # with the Go client.
        Client([self.rec.addr], token="s3cret", timeout=1).status()
        Client(["http://localhost:%s" % self.rec.addr.rsplit(":", 1)[1]], token="s3cret", timeout=1).status()
        self.assertEqual(self.rec.seen, [("/v1/cluster", "Bearer s3cret")] * 2)

    def test_insecure_allows_the_token_over_http_when_asked(self):
        c = Client(["http://10.1.2.3:7700"], token="s3cret", insecure=True, timeout=1)
        self.assertEqual(c.endpoints, ["http://10.1.2.3:7700"])

    def test_without_a_token_http_needs_nothing(self):
        Client(["http://" + self.rec.addr], timeout=1).status()
        Client([self.rec.addr], timeout=1).status()
        self.assertEqual([a for _, a in self.rec.seen], [None, None])

    def test_https_endpoints_take_a_token(self):
        c = Client(["https://127.0.0.1:1", "HTTPS://127.0.0.1:2"], token="s3cret", timeout=1)
        self.assertEqual(c.endpoints, ["https://127.0.0.1:1", "https://127.0.0.1:2"])

    def test_with_an_ssl_context_every_endpoint_is_https(self):
        # As the Go client's WithTLS: configuring TLS means using it.
        c = Client(["127.0.0.1:1", "http://127.0.0.1:2"], token="s3cret", ssl_context=ssl.create_default_context(),
                   timeout=1)
        self.assertEqual(c.endpoints, ["https://127.0.0.1:1", "https://127.0.0.1:2"])


class TLSClusterTest(unittest.TestCase):
    """One node serving its API over TLS, requiring a client certificate,
    and accepting a bearer token from a file as well."""

    @classmethod
    def setUpClass(cls):
        cls.tls = make_tls(["n1"])
        t = lambda *p: os.path.join(cls.tls, *p)  # noqa: E731
        fd, cls.tokens = tempfile.mkstemp(prefix="fenced-tokens-")
        with os.fdopen(fd, "w") as f:
            f.write("tok-client-0123456789abcdef client client\n")
        cls.admin = ssl.create_default_context(cafile=t("ca.pem"))
        cls.admin.load_cert_chain(t("admin.pem"), t("admin-key.pem"))
        cls.cluster = Cluster(1, args=lambda node: [
            "--tls-cert", t(node.id, "server.pem"), "--tls-key", t(node.id, "server-key.pem"), "--tls-ca", t("ca.pem"),
            "--tls-client-auth", "require", "--auth-tokens", cls.tokens], probe_ssl=cls.admin)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()
        os.unlink(cls.tokens)
        shutil.rmtree(cls.tls, ignore_errors=True)

    def ctx(self, cert=True):
        t = lambda *p: os.path.join(self.tls, *p)  # noqa: E731
        c = ssl.create_default_context(cafile=t("ca.pem"))
        if cert:
            c.load_cert_chain(t("client.pem"), t("client-key.pem"))
        return c

    def test_mutual_tls(self):
        c = Client(self.cluster.endpoints, ssl_context=self.ctx())
        g = c.acquire("py/tls", "client/a", ttl=10)
        self.assertTrue(c.verify("py/tls", g.token).allow)
        c.release("py/tls", "client/a", g.token)

    def test_mutual_tls_with_a_bearer_token(self):
        # The token is sent over https: allowed without insecure.
        c = Client(self.cluster.endpoints, token="tok-client-0123456789abcdef", ssl_context=self.ctx())
        g = c.acquire("py/tls-token", "client/b", ttl=10)
        c.release("py/tls-token", "client/b", g.token)

    def test_watch_over_mutual_tls(self):
        c = Client(self.cluster.endpoints, token="tok-client-0123456789abcdef", ssl_context=self.ctx())
        with c.watch(key="py/tls-watch") as w:
            # A fresh watch of a key no one holds says so (absent), then sync.
            first = w.get(timeout=30)
            self.assertEqual((first.type, first.state), ("state", "absent"))
            self.assertEqual(w.get(timeout=30).type, "sync")
            g = c.acquire("py/tls-watch", "client/d", ttl=10)
            ev = w.get(timeout=30)
            self.assertEqual((ev.type, ev.token), ("granted", g.token))

    def test_without_a_client_certificate_the_handshake_fails(self):
        c = Client(self.cluster.endpoints, ssl_context=self.ctx(cert=False), timeout=1)
        with self.assertRaises(FencedError):
            c.acquire("py/tls-nocert", "client/c", ttl=10)


if __name__ == "__main__":
    unittest.main()
