#!/usr/bin/env python3
"""Seeded MP4/MOV box mutator (no dependencies).

Parses the box tree of a real clip and applies one or a few mutations to the boxes a merge reads:
field flips in stsd, stts, ctts, stss, stsc, stsz, stco/co64, mdhd, tkhd, elst, hdlr; truncation;
resizing a box; duplicating a box; swapping two sibling boxes. The same (input, seed) always gives
the same mutant and the same description.

    mp4mutate.py INPUT OUTPUT SEED     writes the mutant, prints what was changed on stdout
"""
import random
import struct
import sys

CONTAINERS = {b"moov", b"trak", b"mdia", b"minf", b"stbl", b"edts", b"dinf", b"udta", b"mvex"}
FIELD_BOXES = [b"stsd", b"stts", b"ctts", b"stss", b"stsc", b"stsz", b"stco", b"co64",
               b"mdhd", b"tkhd", b"elst", b"hdlr"]
INTERESTING = [0, 1, 2, 0x7F, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE]


class Box:
    def __init__(self, typ, offset, header, size, parent, depth):
        self.type, self.offset, self.header, self.size = typ, offset, header, size
        self.parent, self.depth, self.children = parent, depth, []

    @property
    def payload(self):
        return self.offset + self.header

    @property
    def end(self):
        return self.offset + self.size

    def path(self):
        names, b = [], self
        while b is not None:
            names.append(b.type.decode("latin-1"))
            b = b.parent
        return "/".join(reversed(names))


def parse(data, start=0, end=None, parent=None, depth=0):
    """Boxes between start and end; containers are parsed recursively. Stops at anything malformed."""
    end = len(data) if end is None else end
    boxes, off = [], start
    while off + 8 <= end:
        size, typ = struct.unpack(">I4s", data[off:off + 8])
        header = 8
        if size == 1:
            if off + 16 > end:
                break
            size = struct.unpack(">Q", data[off + 8:off + 16])[0]
            header = 16
        elif size == 0:
            size = end - off
        if size < header or off + size > end:
            break
        b = Box(typ, off, header, size, parent, depth)
        if typ in CONTAINERS:
            b.children = parse(data, off + header, off + size, b, depth + 1)
        boxes.append(b)
        off += size
    return boxes


def walk(boxes):
    for b in boxes:
        yield b
        yield from walk(b.children)


def fix_sizes(data, box, delta):
    """Adds delta to the 32-bit size of box's ancestors (box itself excluded)."""
    b = box.parent
    while b is not None:
        if b.header == 8:
            size = struct.unpack(">I", data[b.offset:b.offset + 4])[0]
            data[b.offset:b.offset + 4] = struct.pack(">I", (size + delta) & 0xFFFFFFFF)
        else:
            size = struct.unpack(">Q", data[b.offset + 8:b.offset + 16])[0]
            data[b.offset + 8:b.offset + 16] = struct.pack(">Q", (size + delta) & 0xFFFFFFFFFFFFFFFF)
        b = b.parent


def new_value(rng, old, width):
    mask = (1 << (8 * width)) - 1
    choice = rng.randrange(8)
    if choice == 0:
        return rng.choice(INTERESTING) & mask, "interesting"
    if choice == 1:
        return (old + rng.choice([1, -1, 2, -2])) & mask, "off by a little"
    if choice == 2:
        return (old * rng.choice([2, 42, 1000])) & mask, "multiplied"
    if choice == 3:
        return old // rng.choice([2, 42]), "divided"
    if choice == 4:
        return old ^ (1 << rng.randrange(8 * width)), "one bit"
    if choice == 5:
        return rng.randrange(mask + 1), "random"
    if choice == 6:
        return 0, "zero"
    return mask, "all ones"


def flip_field(data, boxes, rng):
    cands = [b for b in walk(boxes) if b.type in FIELD_BOXES and b.size > b.header]
    if not cands:
        return "no field box"
    b = rng.choice(cands)
    n = b.size - b.header
    # Most fields are 32-bit big-endian at 4-byte alignment after the version/flags word.
    width = 4 if n >= 8 and rng.random() < 0.85 else rng.choice([1, 2])
    slots = max(1, (n - width) // width + 1)
    if width == 4 and rng.random() < 0.6:
        slot = rng.randrange(min(slots, 6))            # headers: version/flags, counts, first entries
    else:
        slot = rng.randrange(slots)
    at = b.payload + slot * width
    if at + width > b.end:
        at = b.end - width
    old = int.from_bytes(data[at:at + width], "big")
    new, how = new_value(rng, old, width)
    data[at:at + width] = new.to_bytes(width, "big")
    return "flip %s +%d (%d bytes): %d -> %d (%s)" % (b.path(), at - b.payload, width, old, new, how)


def truncate(data, boxes, rng):
    moov = [b for b in walk(boxes) if b.type == b"moov"]
    if moov and rng.random() < 0.7:
        cut = rng.randrange(moov[0].offset + 8, moov[0].end)
    else:
        cut = rng.randrange(8, len(data))
    del data[cut:]
    return "truncate at %d" % cut


def resize(data, boxes, rng):
    cands = [b for b in walk(boxes) if b.depth > 0 and b.header == 8]
    if not cands:
        return "no box"
    b = rng.choice(cands)
    delta = rng.choice([-8, -4, -1, 1, 4, 8, 0x1000, -(b.size - 8), 0x7FFFFFFF - b.size])
    new = max(0, b.size + delta) & 0xFFFFFFFF
    data[b.offset:b.offset + 4] = struct.pack(">I", new)
    return "resize %s: %d -> %d" % (b.path(), b.size, new)


def duplicate(data, boxes, rng):
    cands = [b for b in walk(boxes) if b.depth > 0 and b.size < 1 << 20]
    if not cands:
        return "no box"
    b = rng.choice(cands)
    copy = bytes(data[b.offset:b.end])
    data[b.end:b.end] = copy
    fix_sizes(data, b, len(copy))
    return "duplicate %s (%d bytes)" % (b.path(), len(copy))


def swap(data, boxes, rng):
    groups = [b.children for b in walk(boxes) if len(b.children) >= 2]
    if not groups:
        return "no siblings"
    kids = rng.choice(groups)
    i, j = sorted(rng.sample(range(len(kids)), 2))
    a, c = kids[i], kids[j]
    blob_a, mid, blob_c = bytes(data[a.offset:a.end]), bytes(data[a.end:c.offset]), bytes(data[c.offset:c.end])
    data[a.offset:c.end] = blob_c + mid + blob_a
    return "swap %s and %s" % (a.path(), c.path())


def remove(data, boxes, rng):
    cands = [b for b in walk(boxes) if b.depth > 0 and (b.type in FIELD_BOXES or b.type in CONTAINERS)]
    if not cands:
        return "no box"
    b = rng.choice(cands)
    del data[b.offset:b.end]
    fix_sizes(data, b, -b.size)
    return "remove %s" % b.path()


OPERATIONS = [(flip_field, 10), (truncate, 1), (resize, 2), (duplicate, 2), (swap, 2), (remove, 1)]


def mutate(data, seed):
    rng = random.Random(seed)
    out = bytearray(data)
    steps = []
    for _ in range(1 if rng.random() < 0.7 else rng.randint(2, 3)):
        boxes = parse(out)
        op = rng.choices([o for o, _ in OPERATIONS], weights=[w for _, w in OPERATIONS])[0]
        steps.append(op(out, boxes, rng))
    return bytes(out), "; ".join(steps)


def main(argv):
    if len(argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1], "rb") as f:
        data = f.read()
    mutant, what = mutate(data, int(argv[3]))
    with open(argv[2], "wb") as f:
        f.write(mutant)
    print(what)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
