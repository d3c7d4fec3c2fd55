/* SPDX-License-Identifier: MIT */
/*
 * uc_bench_spawn.c - `uc_bench spawn`: what a process pays at start under a preload.
 *
 *   uc_bench spawn --count N --with SO --without SO [--cpu C] [--blocks] -- PROGRAM ARG...
 *
 * Runs PROGRAM (posix_spawnp, then waitpid) N times under LD_PRELOAD=WITH and N times
 * under LD_PRELOAD=WITHOUT, alternating and swapping which goes first each pair; the rest
 * of the environment is this process's own (UNICACHE_TABLE and the like: the caller sets
 * them). Prints one JSON object: the added microseconds per start (median of the paired
 * differences, its 95 % interval) and the ratio. This process itself should run with no
 * preload: it only spawns.
 */
#define _GNU_SOURCE
#include "uc_bench.h"

#include <getopt.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

extern char **environ;

/* this process's environment with LD_PRELOAD=so instead of its own (env_free frees it) */
static char **env_with(const char *so)
{
	size_t n = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	env = calloc(n + 2, sizeof(char *));
	if (env && asprintf(&env[k++], "LD_PRELOAD=%s", so) < 0) {
		free(env);
		env = NULL;
	}
	if (!env)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0)
			env[k++] = environ[i];
	return env;
}

static void env_free(char **env)
{
	if (env)
		free(env[0]); /* the LD_PRELOAD entry: the rest are environ's own */
	free(env);
}

/* one start of argv[0] under env, in us; < 0 when it failed */
static double start_once(char **argv, char **env)
{
	uint64_t t0 = ucb_now_ns();
	pid_t pid;
	int status;

	if (posix_spawnp(&pid, argv[0], NULL, NULL, argv, env) != 0)
		return -1;
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return -1;
	return (double)(ucb_now_ns() - t0) / 1e3;
}

int ucb_cmd_spawn(int argc, char **argv)
{
	static const struct option opts[] = {
		{"count", required_argument, NULL, 'n'}, {"with", required_argument, NULL, 'w'},
		{"without", required_argument, NULL, 'o'}, {"cpu", required_argument, NULL, 'c'},
		{"blocks", no_argument, NULL, 'b'}, {NULL, 0, NULL, 0}};
	const char *so[2] = {NULL, NULL};
	long count = 0;
	int cpu = -1, blocks = 0, opt;
	char **env[2] = {NULL, NULL};
	int rc = 2;
	struct ucb_samples samples = {0};
	struct ucb_summary sum;

	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'n': count = strtol(optarg, NULL, 10); break;
		case 'w': so[UCB_WITH] = optarg; break;
		case 'o': so[UCB_WITHOUT] = optarg; break;
		case 'c': cpu = (int)strtol(optarg, NULL, 10); break;
		case 'b': blocks = 1; break;
		default: return 2;
		}
	}
	if (count < 1 || count > 1000000 || !so[0] || !so[1] || optind >= argc) {
		fprintf(stderr, "uc_bench spawn: --count N (1..10^6) --with SO --without SO "
				"-- PROGRAM [ARG...] required\n");
		return 2;
	}
	if (ucb_pin(cpu) < 0 || !(env[0] = env_with(so[0])) || !(env[1] = env_with(so[1]))) {
		fprintf(stderr, "uc_bench spawn: cannot pin to CPU %d or copy the environment\n", cpu);
		goto out;
	}
	/* one untimed start each: the program's pages and the loader's caches warm */
	for (int p = 0; p < 2; p++)
		if (start_once(&argv[optind], env[p]) < 0)
			goto failed;
	for (long k = 0; k < count; k++) {
		double us[2];

		for (int i = 0; i < 2; i++) {
			int p = (int)(k & 1) ^ i;

			us[p] = start_once(&argv[optind], env[p]);
			if (us[p] < 0)
				goto failed;
		}
		if (ucb_add_sample(&samples, us[UCB_WITH], us[UCB_WITHOUT]) != 0)
			goto failed;
	}
	if (ucb_summarize(&samples, &sum) != 0)
		goto failed;
	printf("{\"cmd\":\"spawn\",\"count\":%ld,", count);
	ucb_print_summary(stdout, &sum, "us");
	if (blocks) {
		putchar(',');
		ucb_print_blocks(stdout, &samples);
	}
	printf("}\n");
	rc = 0;
	goto out;
failed:
	fprintf(stderr, "uc_bench spawn: %s failed to start or exit 0\n", argv[optind]);
out:
	ucb_samples_free(&samples);
	env_free(env[0]);
	env_free(env[1]);
	return rc;
}
