#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# What the CPU the benchmarks run on charges for the operations that the
# two ublk drivers' io paths differ in: a direct call and its return, an
# indirect call, a relaxed load and a release store made through a call
# (what a Rust atomic costs without CONFIG_RUST_INLINE_HELPERS: a call to
# a rust_helper_*), and a fully ordered compare-and-exchange inline and
# through a call. Nanoseconds per operation, from user-space loops (the
# guest's kernel code runs on the same emulated CPU).
#
# Run it on the host and in the guest, and compare: under QEMU TCG a call
# costs many times what it costs the host, an atomic operation barely
# more, so a driver that makes more calls per I/O shows a larger gap
# under TCG than it would on hardware.
#
#   bash xtask/guest/tcg_costs.sh                          # the host
#   cargo xtask vm --driver none -- bash "$PWD"/xtask/guest/tcg_costs.sh
#
# N sets the iterations per loop (default 20000000).
set -e
N=${N:-20000000}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir"/costs.c <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static int word;
volatile int sink;

__attribute__((noinline)) static int next(int x) { return x + 1; }
static int (*volatile next_ptr)(int) = next;

__attribute__((noinline)) static int load(int *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

__attribute__((noinline)) static void store_release(int *p, int v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

__attribute__((noinline)) static int cmpxchg(int *p, int old, int new)
{
	return __atomic_compare_exchange_n(p, &old, new, 0, __ATOMIC_SEQ_CST,
					   __ATOMIC_RELAXED);
}

#define LOOP(name, body)						\
	do {								\
		double t = now();					\
		for (i = 0; i < n; i++) {				\
			body;						\
		}							\
		printf("%-36s %6.2f ns\n", name, (now() - t) / n * 1e9); \
	} while (0)

int main(int argc, char **argv)
{
	long n = atol(argv[1]), i;
	int s = 0;

	LOOP("loop and a store (the base)", sink = i);
	LOOP("call and return", s = next(s));
	LOOP("indirect call and return", s = next_ptr(s));
	LOOP("relaxed load, through a call", s += load(&word));
	LOOP("release store, through a call", store_release(&word, i));
	LOOP("compare-and-exchange, inline", {
		int old = word;
		__atomic_compare_exchange_n(&word, &old, (int)i, 0,
					    __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
	});
	LOOP("compare-and-exchange, through a call", s += cmpxchg(&word, word, i));
	sink = s;
	return 0;
}
EOF
cc -O2 -o "$dir"/costs "$dir"/costs.c
echo "$(uname -r) $(uname -m), $(nproc) CPUs, $N iterations per loop:"
"$dir"/costs "$N"
