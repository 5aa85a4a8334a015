import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, existsSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT } from './harness.js';

const PKG = join(ROOT, 'clients', 'js');
const README = readFileSync(join(PKG, 'README.md'), 'utf8');

function npmAvailable() {
  try { execFileSync('npm', ['--version'], { stdio: 'ignore' }); return true; } catch { return false; }
}

// A new project that installs the client without a registry and imports it
// by its package name, as the README says.
const made = [];
after(() => made.forEach((d) => rmSync(d, { recursive: true, force: true })));

function project() {
  const dir = mkdtempSync(join(tmpdir(), 'fenced-js-app-'));
  made.push(dir);
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true, type: 'module' }));
  return dir;
}

const npm = (cwd, ...args) => execFileSync('npm', [...args, '--offline', '--no-audit', '--no-fund'], { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });

function importsByName(dir) {
  const out = execFileSync(process.execPath, ['--input-type=module', '-e',
    "import { FencedClient, FencingToken, FenceGuard } from 'fenced-client'; "
    + "console.log(typeof FencedClient, FencingToken.parse('4294967297').isNewerThan(1n), typeof new FenceGuard().admit)"], { cwd: dir, encoding: 'utf8' });
  assert.equal(out.trim(), 'function true function');
  assert.ok(existsSync(join(dir, 'node_modules', 'fenced-client', 'src', 'index.d.ts')), 'the types are installed');
}

test('the README says how to install from the checkout', () => {
  assert.match(README, /npm install \.\/clients\/js/);
});

test('npm install of the checkout works offline and the package imports by name', { skip: !npmAvailable() && 'npm is not installed' }, () => {
  const dir = project();
  npm(dir, 'install', PKG);
  importsByName(dir);
});

test('npm pack gives a tarball that installs offline with every module the package imports', { skip: !npmAvailable() && 'npm is not installed' }, () => {
  const dir = project();
  npm(dir, 'pack', PKG, '--pack-destination', dir);
  const tgz = readdirSync(dir).find((f) => f.endsWith('.tgz'));
  assert.ok(tgz, 'no tarball');
  npm(dir, 'install', `./${tgz}`);
  importsByName(dir);
});
