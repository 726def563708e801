"""torch.load ignores the CRC-32 stored for each record of a torch.save zip file.

Bug: torch.save writes a zip archive whose records each carry a CRC-32, but torch.load never checks
them. Flipping 16 bytes in the middle of a tensor's payload (record `<archive>/data/0`) leaves a file
that torch.load(weights_only=True) reads without any error, returning different values, while
zipfile.ZipFile(path).testzip() immediately names the damaged record.

Correct behaviour: torch.load raises an error on a record whose CRC-32 does not match (as zipfile does),
instead of silently returning corrupted weights.

Note: torch.distributed.checkpoint's own format (.distcp files + .metadata) stores no checksum at all,
so a DCP checkpoint has nothing that could be checked.

Seen on: torch 2.13.0+cpu.
Upstream: https://github.com/pytorch/pytorch/issues/126952 (open): the CRCs are written but never checked.

Run: python reports/findings/repro/torch_load_ignores_crc.py
Exit 1 + "BUG PRESENT:" if it reproduces, 0 + "FIXED:" if not, 2 on any setup failure.
"""

import os
import shutil
import struct
import sys
import tempfile
import traceback
import zipfile

import torch

N_FLIP = 16


def main():
    tmp = tempfile.mkdtemp()
    try:
        path = os.path.join(tmp, "ckpt.pt")
        original = {"w": torch.arange(512, dtype=torch.float32)}
        torch.save(original, path)

        with zipfile.ZipFile(path) as zf:
            info = next(i for i in zf.infolist() if i.filename.endswith("/data/0"))
        assert info.compress_type == zipfile.ZIP_STORED, "expected an uncompressed record"
        with open(path, "rb") as f:
            f.seek(info.header_offset)
            header = f.read(30)
        assert header[:4] == b"PK\x03\x04", "not a local file header"
        name_len, extra_len = struct.unpack("<HH", header[26:30])
        start = info.header_offset + 30 + name_len + extra_len
        flip_at = start + info.file_size // 2
        with open(path, "r+b") as f:
            f.seek(flip_at)
            chunk = f.read(N_FLIP)
            f.seek(flip_at)
            f.write(bytes(b ^ 0xFF for b in chunk))
        print(
            f"inverted {N_FLIP} bytes at file offset {flip_at} inside record {info.filename!r} "
            f"(payload {info.file_size} bytes from offset {start}, stored CRC-32 {info.CRC:#010x})"
        )

        with zipfile.ZipFile(path) as zf:
            bad = zf.testzip()
        print(f"zipfile testzip() reports first bad record: {bad!r}")

        try:
            loaded = torch.load(path, weights_only=True)
        except Exception as e:
            print(f"FIXED: torch.load rejected the damaged file: {type(e).__name__}: {e}")
            return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    if set(loaded) != set(original) or type(loaded["w"]) is not torch.Tensor:
        print(f"BUG PRESENT: torch.load returned without error but a different object: {loaded!r}")
        return 1
    if torch.equal(loaded["w"], original["w"]):
        print("ERROR: loaded values equal the original; the corruption did not land in the payload")
        return 2
    changed = (loaded["w"] != original["w"]).nonzero().flatten().tolist()
    i = changed[0]
    print(
        f"BUG PRESENT: torch.load(weights_only=True) returned without error but {len(changed)} of "
        f"{original['w'].numel()} values differ (indices {changed}, e.g. w[{i}] = "
        f"{loaded['w'][i].item()!r} instead of {original['w'][i].item()!r}); zipfile.testzip() flags {bad!r}"
    )
    return 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)
