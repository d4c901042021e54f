#!/usr/bin/env python3
"""Converts verl's parquet prompt files (dapo-math-17k.parquet, aime-2024.parquet)
to the JSONL that dapo reads (data.train_files, data.val_files).

    python3 jobs/convert_verl_data.py INPUT.parquet OUTPUT.jsonl [--keep-duplicates]

One JSON object per line, in verl's schema, UTF-8 unescaped: every column of
the file in the file's order, with the fields dapo reads in the form it reads
them (include/dapo/data/dataset.h):
  - prompt: the list of {"content", "role"} messages as stored (or a string:
    dapo's raw form);
  - reward_model.ground_truth: text; a number becomes its decimal text as
    dapo makes it (34 and 34.0 -> "34", 2.5 -> "2.5");
  - extra_info.index: text; an integer (or an integral float) becomes its
    digits.
Other columns and fields are kept (pandas' __index_level_N__ columns are
dropped); integral floats below 2^53 among them are written as integers, and
non-finite floats as null.

verl's DAPO files repeat their prompts (DAPO-Math-17k holds each of its
~17.9k prompts ~100 times, AIME 2024 its 30 problems 32 times). By default
only the first row of each (prompt messages, ground truth) pair is kept; the
printout gives the copy counts, from which train.total_epochs follows:
verl's one pass over the repeated file is ~copies passes over the kept
prompts. --keep-duplicates keeps every row.

Parquet is read with pyarrow when python has it, else with hyparquet (npm,
pure JavaScript) through node: bash jobs/fetch_hyparquet.sh puts it in
build/hyparquet (or set DAPO_HYPARQUET to its folder). Both readers give the
same bytes. --reader picks one.

Exit status: 0 done; 2 bad input (not a parquet file, a missing column, a
value of the wrong type), no parquet reader, or OUTPUT that is INPUT. OUTPUT
is written to a temporary file beside it, then renamed: a failed run leaves
no OUTPUT, or the old one.
"""

import argparse
import base64
import decimal
import hashlib
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HELPER = os.path.join(REPO, "jobs", "read_parquet_rows.mjs")
VERL_COLUMNS = ("data_source", "prompt", "ability", "reward_model", "extra_info")
REQUIRED_COLUMNS = ("prompt", "reward_model")
EXACT_INT = 2 ** 53  # beyond, a float no longer names one integer (dapo's rule too)
CHILDREN = []  # the node reader, ended when the conversion stops early


class ConvertError(Exception):
    """A user-facing error: the message names the file; exit status 2."""


# --- numbers as dapo writes them ------------------------------------------------

def float_text(d):
    """The text C++'s std::to_chars(double) gives (dapo's float_text): the
    shortest digits that read back as d, in fixed or scientific notation,
    whichever is shorter (fixed on a tie); fixed integral values exact."""
    if d == 0:
        return "-0" if math.copysign(1.0, d) < 0 else "0"
    sign = "-" if d < 0 else ""
    a = abs(d)
    t = decimal.Decimal(repr(a)).as_tuple()  # repr: the shortest digits that read back as a
    digits = "".join(map(str, t.digits))
    exp = t.exponent + len(digits) - len(digits.rstrip("0"))  # a = digits * 10^exp
    digits = digits.rstrip("0")
    n = len(digits)
    sci_exp = exp + n - 1
    sci = digits[0] + ("." + digits[1:] if n > 1 else "") + "e" + ("-" if sci_exp < 0 else "+") + "%02d" % abs(sci_exp)
    if exp >= 0:
        fixed = str(int(a))  # an integral double: its exact digits
    elif -exp < n:
        fixed = digits[:n + exp] + "." + digits[n + exp:]
    else:
        fixed = "0." + "0" * (-exp - n) + digits
    return sign + (fixed if len(fixed) <= len(sci) else sci)


def plain(value, where):
    """A reader's value as plain JSON data: both readers' values end alike."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        if value == math.floor(value) and abs(value) < EXACT_INT:
            return int(value)
        return value
    if isinstance(value, decimal.Decimal):
        return plain(float(value), where)
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise ConvertError(f"field {where}: binary data that is not UTF-8 text") from None
    if isinstance(value, dict):
        if len(value) == 1 and "\0bytes" in value:  # read_parquet_rows.mjs's bytes
            return plain(base64.b64decode(value["\0bytes"]), where)
        return {str(k): plain(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if hasattr(value, "item") and callable(value.item):  # a numpy scalar
        return plain(value.item(), where)
    raise ConvertError(f"field {where}: a value of type {type(value).__name__}, which the converter "
                       "does not support")


def type_name(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return f"the float {value!r}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a struct"
    return type(value).__name__


# --- one row ----------------------------------------------------------------------

def convert_row(row):
    """(the output object, its dedup key) for one row of plain values; raises
    ValueError("field F: ...") for a value dapo would refuse."""
    prompt = row.get("prompt")
    if isinstance(prompt, list):
        if not prompt:
            raise ValueError("field prompt: empty list of messages")
        key_messages = []
        for i, m in enumerate(prompt):
            at = f"prompt[{i}]"
            if not isinstance(m, dict):
                raise ValueError(f"field {at}: expected a message {{content, role}}, got {type_name(m)}")
            role, content = m.get("role"), m.get("content")
            if not isinstance(role, str):
                raise ValueError(f"field {at}.role: expected a string, got {type_name(role)}")
            if not role:
                raise ValueError(f"field {at}.role: empty role")
            if not isinstance(content, str):
                raise ValueError(f"field {at}.content: expected a string, got {type_name(content)}")
            key_messages.append([role, content])
        key_prompt = key_messages
    elif isinstance(prompt, str) and prompt:
        key_prompt = prompt
    else:
        raise ValueError("field prompt: expected a list of messages {content, role} (or a non-empty "
                         f"string), got {type_name(prompt) if prompt != '' else 'an empty string'}")

    reward_model = row.get("reward_model")
    if not isinstance(reward_model, dict):
        raise ValueError(f"field reward_model: expected a struct {{ground_truth, style}}, got "
                         f"{type_name(reward_model)}")
    truth = reward_model.get("ground_truth")
    if isinstance(truth, str):
        text = truth
    elif isinstance(truth, int) and not isinstance(truth, bool):
        text = str(truth)
    elif isinstance(truth, float):
        text = float_text(truth)
    elif truth is None:
        raise ValueError("field reward_model.ground_truth: missing (null, or a float that is not finite)")
    else:
        raise ValueError(f"field reward_model.ground_truth: expected a string or a number, got {type_name(truth)}")
    if not text.strip(" \t\r\n"):
        raise ValueError("field reward_model.ground_truth: empty ground truth")

    source = row.get("data_source")
    if source is not None and not isinstance(source, str):
        raise ValueError(f"field data_source: expected a string, got {type_name(source)}")

    extra = row.get("extra_info")
    index = None
    if extra is not None:
        if not isinstance(extra, dict):
            raise ValueError(f"field extra_info: expected a struct, got {type_name(extra)}")
        index = extra.get("index")
        if isinstance(index, int) and not isinstance(index, bool):
            index = str(index)
        elif index is not None and not isinstance(index, str):
            raise ValueError(f"field extra_info.index: expected a string or an integer, got {type_name(index)}")

    out = {}
    for name, value in row.items():
        if name == "reward_model":
            value = dict(value, ground_truth=text)
        elif name == "extra_info" and value is not None and "index" in value:
            value = dict(value, index=index)
        out[name] = value
    key = json.dumps([key_prompt, text], ensure_ascii=False)
    return out, hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).digest(), source, index


# --- readers ------------------------------------------------------------------------

def check_parquet_magic(path):
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(4)
            f.seek(max(size - 4, 0))
            tail = f.read(4)
    except OSError as e:
        raise ConvertError(f"{path}: cannot read: {e.strerror}") from None
    if size < 12 or head != b"PAR1" or tail != b"PAR1":
        raise ConvertError(f"{path}: not a parquet file (a parquet file starts and ends with \"PAR1\")")


def have_pyarrow():
    try:
        import pyarrow.parquet  # noqa: F401
        return True
    except ImportError:
        return False


def hyparquet_dir():
    """(the folder where hyparquet should be, whether it is there)."""
    d = os.environ.get("DAPO_HYPARQUET") or os.path.join(REPO, "build", "hyparquet")
    return d, os.path.isfile(os.path.join(d, "src", "node.js"))


def read_pyarrow(path):
    """(column names, row count, iterator of {column: value})."""
    import pyarrow
    import pyarrow.parquet as pq
    try:
        pf = pq.ParquetFile(path)
        names = pf.schema_arrow.names
        num_rows = pf.metadata.num_rows
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ...
        raise ConvertError(f"{path}: not a readable parquet file: {e}") from None

    def to_list(column):
        try:
            return column.to_pylist(maps_as_pydicts="strict")  # pyarrow >= 13
        except TypeError:
            return column.to_pylist()

    def rows():
        try:
            for batch in pf.iter_batches(batch_size=8192):
                columns = [to_list(batch.column(i)) for i in range(batch.num_columns)]
                for values in zip(*columns):
                    yield dict(zip(names, values))
        except (pyarrow.ArrowException, OSError) as e:
            raise ConvertError(f"{path}: cannot read the parquet data: {e}") from None

    return names, num_rows, rows(), f"pyarrow {pyarrow.__version__}"


def read_hyparquet(path, hp_dir):
    node = shutil.which("node")
    err = tempfile.TemporaryFile()
    command = [node]
    if "--max-old-space-size" not in os.environ.get("NODE_OPTIONS", ""):
        # hyparquet holds a whole row group's rows (pandas writes up to 1Mi rows in one; DAPO-Math's
        # 1.79M rows take several GB): let node's heap grow to 3/4 of the memory, not its ~4 GB default.
        try:
            memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2 ** 20
            command.append(f"--max-old-space-size={max(2048, memory_mb * 3 // 4)}")
        except (ValueError, OSError, AttributeError):
            pass
    proc = subprocess.Popen(command + [HELPER, hp_dir, path], stdout=subprocess.PIPE, stderr=err)
    CHILDREN.append(proc)

    def failure():
        proc.stdout.close()
        rc = proc.wait()
        err.seek(0)
        text = err.read().decode("utf-8", "replace").strip()
        err.close()
        if "heap out of memory" in text:
            return ConvertError(f"{path}: node ran out of memory reading it (hyparquet decodes a whole row group "
                                "at once): give node more, e.g. NODE_OPTIONS=--max-old-space-size=16384, "
                                "or use pyarrow (python3 -m pip install pyarrow)")
        if text.startswith(path + ": "):
            text = text[len(path) + 2:]
        return ConvertError(f"{path}: not a readable parquet file (hyparquet: {text or f'node exited with {rc}'})")

    header = proc.stdout.readline()
    if not header:
        raise failure()
    head = json.loads(header)
    names = head["columns"]

    def rows():
        for line in proc.stdout:
            yield dict(zip(names, json.loads(line)))
        proc.stdout.close()
        if proc.wait() != 0:
            raise failure()
        err.close()

    with open(os.path.join(hp_dir, "package.json"), encoding="utf-8") as f:
        version = json.load(f).get("version", "?")
    return names, head["num_rows"], rows(), f"hyparquet {version} through node"


NO_READER = """cannot read parquet: no reader available. Either
  - give python pyarrow:   python3 -m pip install pyarrow   (or: conda install pyarrow)
  - or use node + npm:     bash jobs/fetch_hyparquet.sh
    (puts the pure-JavaScript reader hyparquet in build/hyparquet; elsewhere: set DAPO_HYPARQUET
     to its folder; Debian: apt-get install nodejs npm)"""


def open_reader(path, which):
    if which in ("auto", "pyarrow") and have_pyarrow():
        return read_pyarrow(path)
    if which == "pyarrow":
        raise ConvertError("--reader pyarrow: this python has no pyarrow (python3 -m pip install pyarrow, "
                           "or conda install pyarrow)")
    hp_dir, hp_found = hyparquet_dir()
    if shutil.which("node") and hp_found:
        return read_hyparquet(path, hp_dir)
    if which == "hyparquet":
        missing = "node is not on PATH" if not shutil.which("node") else \
            f"no hyparquet in {hp_dir} (bash jobs/fetch_hyparquet.sh [DIR] fetches it; DAPO_HYPARQUET=DIR)"
        raise ConvertError(f"--reader hyparquet: {missing}")
    raise ConvertError(NO_READER)


# --- the conversion --------------------------------------------------------------------

def same_file(a, b):
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def convert(args):
    src, dst = args.input, args.output
    if not os.path.isfile(src):
        raise ConvertError(f"{src}: no such file" if not os.path.exists(src) else f"{src}: not a regular file")
    if same_file(src, dst):
        raise ConvertError(f"{dst}: is the input file {src}: refusing to overwrite the input")
    if os.path.isdir(dst):
        raise ConvertError(f"{dst}: is a directory")
    out_dir = os.path.dirname(os.path.abspath(dst))
    if not os.path.isdir(out_dir):
        raise ConvertError(f"{dst}: no such directory {out_dir}")
    check_parquet_magic(src)

    names, num_rows, rows, reader = open_reader(src, args.reader)
    # pandas' stored index (a frame written after filtering rows): not data.
    skip = {n for n in names if re.fullmatch(r"__index_level_\d+__", n)}
    names = [n for n in names if n not in skip]
    missing = [c for c in REQUIRED_COLUMNS if c not in names]
    if missing:
        raise ConvertError(f"{src}: missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                           f"(verl's schema: {', '.join(VERL_COLUMNS)}; the file has: {', '.join(names) or 'none'})")

    stem = os.path.splitext(os.path.basename(dst))[0]  # dapo's data_source when a row has none
    copies = {}       # dedup key -> rows
    uids = {}         # digest of (data_source, index) as dapo keys prompts -> output line
    uid_clash = None  # (count, first example)
    written = 0
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(dst) + ".", suffix=".partial", dir=out_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
            for r, raw in enumerate(rows):
                try:
                    row = {name: plain(value, name) for name, value in raw.items() if name not in skip}
                    obj, key, source, index = convert_row(row)
                except (ConvertError, ValueError) as e:
                    raise ConvertError(f"{src}: row {r} (counting from 0): {e}") from None
                seen = copies.get(key, 0)
                copies[key] = seen + 1
                if seen and not args.keep_duplicates:
                    continue
                try:
                    line = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
                    out.write(line + "\n")
                except UnicodeEncodeError:
                    raise ConvertError(f"{src}: row {r} (counting from 0): text that is not valid Unicode") from None
                written += 1
                uid_key = json.dumps([source or stem, index or str(written - 1)], ensure_ascii=False)
                digest = hashlib.blake2b(uid_key.encode("utf-8", "surrogatepass"), digest_size=16).digest()
                if digest in uids:
                    n, example = uid_clash or (0, (written, uids[digest], source or stem, index or str(written - 1)))
                    uid_clash = (n + 1, example)
                else:
                    uids[digest] = written
        if not copies:
            raise ConvertError(f"{src}: no rows")
        if sum(copies.values()) != num_rows:
            raise ConvertError(f"{src}: read {sum(copies.values())} rows, but the file's metadata says {num_rows}")
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, dst)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise

    rows_read = sum(copies.values())
    counts = sorted(copies.values())
    distinct = len(counts)
    mean = rows_read / distinct
    epochs = max(1, round(mean))
    mean_text = f"{mean:.2f}".rstrip("0").rstrip(".")
    median = statistics.median(counts)
    median_text = str(int(median)) if median == int(median) else f"{median:.1f}"
    print(f"{src}: {rows_read} rows (read with {reader}), {distinct} distinct prompts (prompt messages + ground truth)")
    print(f"copies per prompt: min {counts[0]}, median {median_text}, mean {mean_text}, "
          f"max {counts[-1]}")
    if args.keep_duplicates:
        print(f"wrote all {written} rows to {dst} (--keep-duplicates): one pass over this file "
              f"(train.total_epochs = 1) is verl's one pass over the parquet")
    else:
        print(f"wrote {written} prompts (the first row of each) to {dst}")
        print(f"run length: verl's recipe makes one pass over all {rows_read} rows, i.e. {mean_text} passes over each "
              f"prompt on average; to train as long on {os.path.basename(dst)}, set train.total_epochs = {epochs} "
              f"(with train.total_steps = 0)")
    if uid_clash:
        n, (line, first, source, index) = uid_clash
        print(f"warning: {n} line(s) of {dst} repeat the (data_source, extra_info.index) of an earlier line, "
              f"e.g. line {line} that of line {first} (\"{source}\", \"{index}\"): dapo refuses such a file "
              "(prompt uids must be unique)" + ("; drop --keep-duplicates" if args.keep_duplicates else ""),
              file=sys.stderr)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Converts a verl parquet prompt file (dapo-math-17k.parquet, aime-2024.parquet) to dapo's "
                    "JSONL, keeping one row per (prompt, ground truth) unless --keep-duplicates.")
    parser.add_argument("input", metavar="INPUT.parquet")
    parser.add_argument("output", metavar="OUTPUT.jsonl")
    parser.add_argument("--keep-duplicates", action="store_true",
                        help="keep every row (default: the first row of each prompt messages + ground truth)")
    parser.add_argument("--reader", choices=("auto", "pyarrow", "hyparquet"), default="auto",
                        help="auto (default): pyarrow when importable, else hyparquet through node")
    args = parser.parse_args(argv)
    try:
        convert(args)
    except ConvertError as e:
        print(f"convert_verl_data: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        for proc in CHILDREN:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
