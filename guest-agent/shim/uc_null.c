/* SPDX-License-Identifier: MIT */
/*
 * uc_null.c - libuc_null.so, the shim benchmark's control: a preload that interposes
 * nothing. A program under it pays what any preloaded library costs (the loader's work, one
 * more object in the lookup scope) and nothing else, so what `unicache bench shim` measures
 * beside it is the shim's own work.
 */
int uc_null_marker;
