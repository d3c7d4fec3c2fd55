# qemu-patches/colormem/colormem.mk — included by the top Makefile.
# colormem-build: qemu-patches/colormem/libuccolormem.a and its test program test_colormem
# (run by tests/colormem/test_colormem.py). Plain gcc, no extra packages.
COLORMEM_DIR := qemu-patches/colormem
COLORMEM_CC ?= gcc
COLORMEM_CFLAGS ?= -O2 -g -std=gnu11 -Wall -Wextra -Werror -fPIC

$(COLORMEM_DIR)/colormem.o: $(COLORMEM_DIR)/colormem.c $(COLORMEM_DIR)/colormem.h
	$(COLORMEM_CC) $(COLORMEM_CFLAGS) -c -o $@ $<

$(COLORMEM_DIR)/libuccolormem.a: $(COLORMEM_DIR)/colormem.o
	ar rcs $@ $^

$(COLORMEM_DIR)/test_colormem: $(COLORMEM_DIR)/test_colormem.c $(COLORMEM_DIR)/libuccolormem.a
	$(COLORMEM_CC) $(COLORMEM_CFLAGS) -o $@ $< $(COLORMEM_DIR)/libuccolormem.a

.PHONY: colormem-build colormem-clean
colormem-build: $(COLORMEM_DIR)/libuccolormem.a $(COLORMEM_DIR)/test_colormem

colormem-clean:
	rm -f $(COLORMEM_DIR)/colormem.o $(COLORMEM_DIR)/libuccolormem.a $(COLORMEM_DIR)/test_colormem

SETUP_TARGETS += colormem-build
