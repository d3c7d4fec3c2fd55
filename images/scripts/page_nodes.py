#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-or-later
# Prints {node: resident pages} of the file argv[1], as the guest kernel reports them:
# mincore, then move_pages with no target nodes (the node of each page-cache page).
#
# A script the host runs in the test guest (through the image runner), sent whole as
# text: by tools/demo.py with python3 -c (so this file holds no single quote) and by
# tests/agent/test_agent_numa_qemu.py on stdin. Standard library only (ctypes).
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
libc.syscall.restype = ctypes.c_long
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
npages = (size + 4095) // 4096
addr = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
vec = (ctypes.c_ubyte * npages)()
assert libc.mincore(ctypes.c_void_p(addr), size, vec) == 0, ctypes.get_errno()
resident = [i for i in range(npages) if vec[i] & 1]
for i in resident:  # map the resident pages (a fault on a cached page: no I/O)
    ctypes.string_at(addr + 4096 * i, 1)
pages = (ctypes.c_void_p * len(resident))(*[addr + 4096 * i for i in resident])
status = (ctypes.c_int * len(resident))()
# move_pages(pid 0, count, pages, nodes NULL, status, flags 0): the node of each page
rc = libc.syscall(279, 0, len(resident), pages, None, status, 0)
assert rc == 0, ctypes.get_errno()
nodes = {}
for s in status:
    nodes[s] = nodes.get(s, 0) + 1
print(json.dumps({"pages": npages, "resident": len(resident), "nodes": nodes}))
