"""The package itself: its import graph, and its README run as written."""

import ast
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import unittest

PKG = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "fenced"))
sys.path.insert(0, os.path.dirname(PKG))


def import_graph():
    """Module -> the package's modules it imports, anywhere in its body (an
    import inside a function is still a cycle, only a deferred one)."""
    graph = {}
    for name in sorted(os.listdir(PKG)):
        if not name.endswith(".py"):
            continue
        mod = name[:-3]
        with open(os.path.join(PKG, name), encoding="utf-8") as f:
            tree = ast.parse(f.read(), name)
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    deps.add(node.module.split(".")[0])
                else:
                    deps.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fenced."):
                deps.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                deps.update(a.name.split(".")[1] for a in node.names if a.name.startswith("fenced."))
        graph[mod] = deps - {mod}
    return graph


def cycle(graph):
    """A cycle of the graph as a list of modules, or None."""
    state = {}

    def visit(m, path):
        state[m] = "open"
        for d in sorted(graph.get(m, ())):
            if d == "__init__":
                continue
            if state.get(d) == "open":
                return path[path.index(d):] + [d]
            if d not in state:
                found = visit(d, path + [d])
                if found:
                    return found
        state[m] = "done"
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m, [m])
            if found:
                return found
    return None


class PackageTest(unittest.TestCase):
    def test_no_import_cycle(self):
        graph = import_graph()
        self.assertIn("client", graph)
        self.assertIsNone(cycle(graph), "import cycle: %s" % " -> ".join(cycle(graph) or []))

    def test_each_module_imports_first_in_a_fresh_interpreter(self):
        for name in sorted(import_graph()):
            mod = "fenced" if name == "__init__" else "fenced." + name
            with self.subTest(module=mod):
                out = subprocess.run([sys.executable, "-c", "import %s" % mod], cwd=os.path.dirname(PKG),
                                     capture_output=True, text=True)
                self.assertEqual(out.returncode, 0, out.stderr)

    def test_public_names(self):
        import fenced
        import fenced.client
        import fenced.lease
        for name in fenced.__all__:
            self.assertTrue(hasattr(fenced, name), name)
        self.assertIs(fenced.client.new_request_id, fenced.new_request_id)
        self.assertIs(fenced.lease.Lease, fenced.Lease)
        for name in ["Client", "Grant", "Verdict", "KeyInfo", "new_request_id"]:
            self.assertTrue(hasattr(fenced.client, name), name)


def readme_snippet():
    """The README's first python block."""
    with open(os.path.join(os.path.dirname(PKG), "README.md"), encoding="utf-8") as f:
        m = re.search(r"```python\n(.*?)```", f.read(), re.S)
    if not m:
        raise AssertionError("README.md has no python block")
    return m.group(1)


class ReadmeTest(unittest.TestCase):
    def setUp(self):
        from tests.harness import Cluster
        self.cluster = Cluster(1)
        self.addCleanup(self.cluster.stop)

    def test_readme_snippet_runs_as_written(self):
        # Run in an empty directory, as a reader would in a new project,
        # with the endpoints the snippet reads from its environment.
        work = tempfile.mkdtemp(prefix="fenced-readme-")
        self.addCleanup(shutil.rmtree, work, True)
        script = os.path.join(work, "snippet.py")
        with open(script, "w", encoding="utf-8") as f:
            f.write(readme_snippet())
        env = dict(os.environ, PYTHONPATH=os.path.dirname(PKG), FENCE_ENDPOINTS=",".join(self.cluster.endpoints))
        out = subprocess.run([sys.executable, script], cwd=work, env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, "the README snippet failed:\n" + out.stderr)
        self.assertEqual(out.stdout.splitlines()[-1:], ["shipped"], out.stdout)
        # It did what it says: the write went through the fence, and the
        # lease was released.
        db = sqlite3.connect(os.path.join(work, "shop.db"))
        try:
            fence = db.execute("SELECT fence FROM fences WHERE key = 'orders-db'").fetchone()
        finally:
            db.close()
        self.assertIsNotNone(fence, "no fenced write")
        from fenced import Client
        info = Client(self.cluster.endpoints).key("orders-db")
        self.assertEqual(info.state, "released")
        self.assertEqual(int(info.token), fence[0])


if __name__ == "__main__":
    unittest.main()
