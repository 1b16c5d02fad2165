"""Multi-domain training corpus from text every Debian 12 system ships.

Domains:
  code   - Python standard library sources (/usr/lib/python3.11, packages
           libpython3.11-stdlib / libpython3.11-minimal), test suites excluded;
  prose  - license texts (/usr/share/common-licenses), the Python help topics
           (pydoc_data/topics.py: plain-English documentation), READMEs, FAQs
           and notes under /usr/share/doc of the required/important packages;
  config - configuration and structured text of the required/important
           packages: /etc files, systemd units, tmpfiles/sysusers/udev rules,
           D-Bus and polkit XML, time-zone tables, dpkg tables;
  math   - generated arithmetic word problems with worked answers ("Q: ... A: ...").

`select` chooses the files (needs dpkg) and writes the manifest (path, size,
SHA-256 per file, and the generator settings for math). `build` reads the
files the manifest lists, checks their hashes, splits every domain into train
and held-out documents and writes them as JSON lines. The held-out split is a
function of names only (hash of the file path, or of path + piece number for
files cut into pieces), so it is the same everywhere.
"""

import argparse
import ast
import gzip
import hashlib
import json
import os
import subprocess
import sys

import mathgen

DOMAINS = ("code", "prose", "config", "math")
PY_DIR = "/usr/lib/python3.11"
PY_PACKAGES = ("libpython3.11-stdlib", "libpython3.11-minimal")
PYDOC_TOPICS = PY_DIR + "/pydoc_data/topics.py"
# Tables of character codes, generated data and test suites: not code a person wrote.
CODE_EXCLUDE_PARTS = ("/test/", "/tests/", "/idle_test/", "/encodings/", "/__phello__/", "/_sysconfigdata")
PROSE_DOC_NAMES = ("README", "FAQ", "TODO", "INTRO", "POSIX", "COMPAT", "RBASH", "copyright", "Documentation")
PROSE_DOC_SUFFIXES = (".txt", ".txt.gz", ".md", ".md.gz")
CONFIG_PREFIXES = (
    "/etc/",
    "/lib/systemd/system/",
    "/lib/systemd/network/",
    "/usr/lib/systemd/",
    "/usr/lib/tmpfiles.d/",
    "/usr/lib/sysusers.d/",
    "/usr/lib/sysctl.d/",
    "/lib/udev/rules.d/",
    "/usr/share/dbus-1/",
    "/usr/share/polkit-1/",
    "/usr/share/zoneinfo/",
    "/usr/share/dpkg/",
    "/usr/share/pam-configs/",
    "/usr/share/base-passwd/",
    "/usr/share/debconf/",
)
MAX_FILE_BYTES = 1 << 20  # larger files are data dumps
PIECE_BYTES = 12000  # prose/config files are cut into pieces of about this size
HELDOUT_ONE_IN = {"code": 16, "prose": 16, "config": 8}
MATH_TRAIN = {"seed": 1, "count": 5000}
MATH_HELDOUT = {"seed": 2, "count": 300}


def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def read_source(path):
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    return data


def is_text(data):
    if b"\0" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def dpkg_files(packages):
    out = subprocess.run(["dpkg", "-L", *packages], check=True, capture_output=True, text=True).stdout
    return sorted({line for line in out.splitlines() if line.startswith("/")})


def base_packages():
    out = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Priority} ${Package}\\n"], check=True, capture_output=True, text=True
    ).stdout
    return sorted(p for prio, p in (l.split() for l in out.splitlines() if l.strip()) if prio in ("required", "important"))


def regular_file(path):
    return os.path.isfile(path) and not os.path.islink(path)


def select_files():
    """Returns [(domain, path)] chosen by the rules above."""
    chosen = []
    for path in dpkg_files(PY_PACKAGES):
        if not path.startswith(PY_DIR + "/") or not path.endswith(".py") or not regular_file(path):
            continue
        if path == PYDOC_TOPICS or any(part in path for part in CODE_EXCLUDE_PARTS):
            continue
        chosen.append(("code", path))
    chosen.append(("prose", PYDOC_TOPICS))
    for name in sorted(os.listdir("/usr/share/common-licenses")):
        path = "/usr/share/common-licenses/" + name
        if regular_file(path):
            chosen.append(("prose", path))
    base_files = dpkg_files(base_packages())
    for path in base_files:
        if not regular_file(path):
            continue
        if path.startswith("/usr/share/doc/"):
            name = os.path.basename(path)
            if "/examples/" in path or "changelog" in name.lower():
                continue
            if name.startswith(PROSE_DOC_NAMES) or name.endswith(PROSE_DOC_SUFFIXES):
                chosen.append(("prose", path))
        elif path.startswith(CONFIG_PREFIXES):
            if "/zoneinfo/" in path and not (path.endswith(".tab") or path.endswith(".zi")):
                continue
            chosen.append(("config", path))
    return chosen


def cmd_select(args):
    seen_content = set()
    rows = []
    for domain, path in select_files():
        try:
            data = read_source(path)
        except OSError:
            continue
        if not data.strip() or len(data) > MAX_FILE_BYTES or not is_text(data):
            continue
        digest = sha256_bytes(data)
        if digest in seen_content:  # identical copyright files of sibling packages
            continue
        seen_content.add(digest)
        rows.append((domain, path, len(data), digest))
    with open(args.manifest, "w") as f:
        f.write("# parspec zoo corpus manifest: domain, path, bytes (decompressed), sha256 (decompressed)\n")
        f.write(f"# math generator: train {json.dumps(MATH_TRAIN)} heldout {json.dumps(MATH_HELDOUT)} version {mathgen.VERSION}\n")
        for row in rows:
            f.write("\t".join(map(str, row)) + "\n")
    for d in DOMAINS[:3]:
        n = sum(1 for r in rows if r[0] == d)
        size = sum(r[2] for r in rows if r[0] == d)
        print(f"{d}: {n} files, {size / 1e6:.2f} MB")


def read_manifest(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            domain, p, size, digest = line.rstrip("\n").split("\t")
            rows.append((domain, p, int(size), digest))
    return rows


def name_hash(name):
    return int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)


def cut_pieces(text, max_bytes):
    """Cuts text at blank lines (or line ends) into pieces of at most ~max_bytes."""
    pieces, current, size = [], [], 0
    for para in text.split("\n\n"):
        chunk = para + "\n\n"
        if size + len(chunk) > max_bytes and current:
            pieces.append("".join(current))
            current, size = [], 0
        while len(chunk) > max_bytes:
            cut = chunk.rfind("\n", 0, max_bytes)
            cut = max_bytes if cut <= 0 else cut + 1
            pieces.append(chunk[:cut])
            chunk = chunk[cut:]
        current.append(chunk)
        size += len(chunk)
    if current:
        pieces.append("".join(current))
    return [p for p in pieces if p.strip()]


def documents_of(domain, path, text):
    """(name, text, split_key) per document; split_key decides train/held-out."""
    if path == PYDOC_TOPICS:
        tree = ast.parse(text)
        topics = ast.literal_eval(tree.body[-1].value)
        return [(f"{path}#{k}", topics[k], f"{path}#{k}") for k in sorted(topics)]
    if domain == "code":
        return [(path, text, path)]
    pieces = cut_pieces(text, PIECE_BYTES)
    if len(pieces) == 1:
        return [(path, pieces[0], path)]
    return [(f"{path}#{i}", p, f"{path}#{i}") for i, p in enumerate(pieces)]


def cmd_build(args):
    rows = read_manifest(args.manifest)
    os.makedirs(args.out, exist_ok=True)
    missing, changed = [], []
    docs = {d: {"train": [], "heldout": []} for d in DOMAINS}
    corpus_hash = hashlib.sha256()
    for domain, path, _size, digest in rows:
        try:
            data = read_source(path)
        except OSError:
            missing.append(path)
            continue
        if sha256_bytes(data) != digest:
            changed.append(path)
        text = data.decode("utf-8", errors="replace")
        for name, body, key in documents_of(domain, path, text):
            split = "heldout" if name_hash(key) % HELDOUT_ONE_IN[domain] == 0 else "train"
            docs[domain][split].append({"name": name, "text": body})
    for split, params in (("train", MATH_TRAIN), ("heldout", MATH_HELDOUT)):
        for i, text in enumerate(mathgen.problems(params["seed"], params["count"])):
            docs["math"][split].append({"name": f"math-{split}-{i}", "text": text})
    stats = {}
    for domain in DOMAINS:
        for split in ("train", "heldout"):
            path = os.path.join(args.out, f"{domain}.{split}.jsonl")
            with open(path, "w") as f:
                for doc in docs[domain][split]:
                    line = json.dumps(doc, ensure_ascii=False) + "\n"
                    f.write(line)
                    corpus_hash.update(line.encode())
            n_bytes = sum(len(d["text"].encode()) for d in docs[domain][split])
            stats[f"{domain}.{split}"] = {"documents": len(docs[domain][split]), "bytes": n_bytes}
    stats["sha256"] = corpus_hash.hexdigest()
    stats["missing_files"] = missing
    stats["changed_files"] = changed
    with open(os.path.join(args.out, "stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    for key, v in stats.items():
        if isinstance(v, dict):
            print(f"{key}: {v['documents']} documents, {v['bytes'] / 1e6:.2f} MB")
    print("corpus sha256", stats["sha256"])
    if missing or changed:
        print(
            f"WARNING: {len(missing)} files of the manifest are missing and {len(changed)} differ from the "
            "recorded hash; the corpus differs from the one the committed models were trained on "
            f"(details in {args.out}/stats.json)",
            file=sys.stderr,
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("select", help="choose the files and write the manifest")
    s.add_argument("--manifest", required=True)
    b = sub.add_parser("build", help="build the split corpus from the manifest")
    b.add_argument("--manifest", required=True)
    b.add_argument("--out", required=True)
    args = ap.parse_args()
    {"select": cmd_select, "build": cmd_build}[args.cmd](args)


if __name__ == "__main__":
    main()
