"""A PEP 517 build backend in the standard library: builds the wheel and the
sdist of the fenced package without setuptools, so installing needs no
package index."""

import base64
import hashlib
import io
import os
import tarfile
import zipfile

NAME = "fenced_client"
DIST = "fenced-client"
VERSION = "0.1.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = "py3-none-any"


def _metadata():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: Client of fenced, a Raft-replicated fencing-token "
            "coordinator (standard library only)\nRequires-Python: >=3.9\nLicense: MIT\n"
            "Provides-Extra: proofs\nRequires-Dist: cryptography>=3.1; extra == \"proofs\"\n"
            "Description-Content-Type: text/markdown\n\n%s" % (DIST, VERSION, readme))


def _package_files():
    pkg = os.path.join(ROOT, "fenced")
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py"):
            yield "fenced/" + name, os.path.join(pkg, name)


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path, digest, len(data))


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    d = os.path.join(metadata_directory, "%s-%s.dist-info" % (NAME, VERSION))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    return os.path.basename(d)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = "%s-%s-%s.whl" % (NAME, VERSION, TAG)
    info = "%s-%s.dist-info" % (NAME, VERSION)
    files = []
    for arc, path in _package_files():
        with open(path, "rb") as f:
            files.append((arc, f.read()))
    files.append((info + "/METADATA", _metadata().encode()))
    files.append((info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: fenced_build\nRoot-Is-Purelib: true\nTag: %s\n" % TAG).encode()))
    files.append((info + "/top_level.txt", b"fenced\n"))
    record = [_record_line(a, d) for a, d in files] + [info + "/RECORD,,"]
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files:
            z.writestr(arc, data)
        z.writestr(info + "/RECORD", "\n".join(record) + "\n")
    return name


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, VERSION)
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ["pyproject.toml", "README.md", "_build/fenced_build.py"] + [a for a, _ in _package_files()]:
            t.add(os.path.join(ROOT, rel), arcname=base + "/" + rel)
        pkg_info = _metadata().encode()
        ti = tarfile.TarInfo(base + "/PKG-INFO")
        ti.size = len(pkg_info)
        t.addfile(ti, io.BytesIO(pkg_info))
    return name
