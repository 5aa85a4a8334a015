"""Offline checks of a grant's proof.

A proof is a JWS compact serialization (RFC 7515) signed with EdDSA over
Ed25519 (RFC 8037) by the fenced leader that made the grant, over its key,
token, holder and the cluster's ID (the format of fence/proof in the Go
module). A resource that pins the cluster's public keys (GET
/v1/signing-keys) refuses, without calling the cluster, a token fenced
never issued. A proof never says the lease is live: no clock is read.

Checking a signature needs the optional ``cryptography`` package
(``pip install 'fenced-client[proofs]'``); the rest of the client does not.
"""

import base64
import binascii
import json

from .errors import FencedError
from .token import MalformedToken, Token

__all__ = ["KeySet", "ProofRefused", "verify_proof", "PROOF_TYPE", "MAX_PROOF_LEN"]

PROOF_TYPE = "fenced-grant+jwt"
MAX_PROOF_LEN = 2048


class ProofRefused(FencedError):
    """A token was refused because of its proof, before any token was
    compared. ``reason`` is one of proof_missing, proof_malformed,
    proof_algorithm, proof_unknown_signer, proof_signature, proof_wrong_key,
    proof_wrong_token, proof_wrong_holder, proof_wrong_cluster (the names of
    the Go and JavaScript guards and of fencectl verify --offline)."""

    code = "invalid_proof"

    def __init__(self, reason, message):
        super().__init__("%s: %s" % (reason, message))
        self.reason = reason


def _ed25519():
    try:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
        from cryptography.exceptions import InvalidSignature
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("checking proofs needs the cryptography package: pip install 'fenced-client[proofs]'") from e
    return Ed25519PublicKey, InvalidSignature


def _b64url(part, what):
    if not isinstance(part, str) or any(c not in _B64 for c in part) or len(part) % 4 == 1:
        raise ProofRefused("proof_malformed", "%s is not base64url" % what)
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise ProofRefused("proof_malformed", "%s is not base64url" % what) from None
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode() != part:
        raise ProofRefused("proof_malformed", "%s is not canonical base64url" % what)
    return raw


_B64 = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def _object(raw, what):
    try:
        v = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ProofRefused("proof_malformed", "%s: %s" % (what, e)) from None
    if not isinstance(v, dict):
        raise ProofRefused("proof_malformed", "%s is not an object" % what)
    return v


class KeySet:
    """The cluster's public signing keys by kid, pinned: a JWKS document
    (the answer of GET /v1/signing-keys, or ``fencectl signing-keys list -o
    json``). A document that is not wholly Ed25519 public keys is refused."""

    def __init__(self, jwks):
        Ed25519PublicKey, self._invalid = _ed25519()
        doc = json.loads(jwks) if isinstance(jwks, (str, bytes)) else jwks
        if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
            raise ValueError('malformed key set: no "keys" array')
        self._keys = {}
        for i, k in enumerate(doc["keys"]):
            if (not isinstance(k, dict) or k.get("kty") != "OKP" or k.get("crv") != "Ed25519" or not k.get("kid") or "d" in k
                    or k.get("use", "sig") != "sig" or k.get("alg", "EdDSA") != "EdDSA" or not isinstance(k.get("x"), str)):
                raise ValueError("malformed key set: key %d is not an Ed25519 public signing key with a kid" % i)
            try:
                x = _b64url(k["x"], "x")
            except ProofRefused:
                raise ValueError("malformed key set: key %d's x is not base64url" % i) from None
            if len(x) != 32:
                raise ValueError("malformed key set: key %d's x is not 32 bytes" % i)
            if k["kid"] in self._keys:
                raise ValueError("malformed key set: kid %s appears twice" % k["kid"])
            self._keys[k["kid"]] = Ed25519PublicKey.from_public_bytes(x)
        self.cluster = doc.get("cluster_id", "") if isinstance(doc.get("cluster_id", ""), str) else ""

    @classmethod
    def load(cls, path):
        """Reads a JWKS file; an error names the file."""
        try:
            with open(path, encoding="utf-8") as f:
                return cls(f.read())
        except (OSError, ValueError) as e:
            raise ValueError("%s: %s" % (path, e)) from None

    @classmethod
    def fetch(cls, base, timeout=10):
        """Fetches a node's /v1/signing-keys once (base: the node's URL)."""
        import urllib.request
        with urllib.request.urlopen(base.rstrip("/") + "/v1/signing-keys", timeout=timeout) as resp:
            return cls(resp.read(1 << 20))

    def __len__(self):
        return len(self._keys)

    def get(self, kid):
        return self._keys.get(kid)


def verify_proof(proof, keys, key, token, cluster="", holder=""):
    """Checks that proof is a genuine proof, by a key of keys, of the grant
    of key with token (and cluster, holder when given); returns its claims
    or raises ProofRefused."""
    if not proof:
        raise ProofRefused("proof_missing", "no proof came with the token")
    if not isinstance(proof, str):
        raise ProofRefused("proof_malformed", "the proof is not text")
    if len(proof.encode("utf-8", "surrogatepass")) > MAX_PROOF_LEN:
        raise ProofRefused("proof_malformed", "longer than %d bytes" % MAX_PROOF_LEN)
    parts = proof.split(".")
    if len(parts) != 3:
        raise ProofRefused("proof_malformed", "not three dot-separated parts")
    header = _object(_b64url(parts[0], "header"), "header")
    extra = sorted(set(header) - {"alg", "kid", "typ"})
    if extra:
        raise ProofRefused("proof_malformed", "header member %s is not accepted" % extra[0])
    if header.get("alg") != "EdDSA":
        raise ProofRefused("proof_algorithm", "alg %r" % header.get("alg"))
    if header.get("typ") != PROOF_TYPE:
        raise ProofRefused("proof_algorithm", "typ %r" % header.get("typ"))
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise ProofRefused("proof_malformed", "header has no kid")
    pub = keys.get(kid) if keys is not None else None
    if pub is None:
        raise ProofRefused("proof_unknown_signer", "kid %s" % kid)
    sig = _b64url(parts[2], "signature")
    if len(sig) != 64:
        raise ProofRefused("proof_malformed", "signature is not 64 bytes")
    try:
        pub.verify(sig, (parts[0] + "." + parts[1]).encode("ascii"))
    except keys._invalid:
        raise ProofRefused("proof_signature", "does not verify with %s" % kid) from None
    claims = _object(_b64url(parts[1], "payload"), "payload")
    if claims.get("kid") != kid:
        raise ProofRefused("proof_malformed", "payload kid differs from header kid")
    try:
        signed = Token.parse(claims.get("token"))
    except (MalformedToken, TypeError, ValueError):
        raise ProofRefused("proof_malformed", "payload token is not decimal text") from None
    want = token if isinstance(token, Token) else Token.parse(str(token))
    if claims.get("key") != key:
        raise ProofRefused("proof_wrong_key", "signed for key %r" % claims.get("key"))
    if int(signed) != int(want):
        raise ProofRefused("proof_wrong_token", "signed for token %s, presented with %s" % (signed, want))
    if cluster and claims.get("cluster") != cluster:
        raise ProofRefused("proof_wrong_cluster", "signed by cluster %r" % claims.get("cluster"))
    if holder and claims.get("holder") != holder:
        raise ProofRefused("proof_wrong_holder", "signed for holder %r" % claims.get("holder"))
    return claims
