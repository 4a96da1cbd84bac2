/*
 * pause: PID 1 of every pod sandbox on the local e2e node (containerd's
 * sandbox_image, e2e/local/images.sh). It holds the pod's namespaces open
 * and does nothing else:
 *   - SIGINT or SIGTERM: exit 0 (the runtime stops the sandbox);
 *   - SIGCHLD: reap every exited child (orphans re-parented to PID 1 when
 *     the pod shares its PID namespace);
 *   - every other signal that can be blocked stays blocked.
 * Signals are taken only inside sigsuspend(), so no signal can arrive between
 * the check and the wait, and all work happens outside the handlers.
 *
 *   gcc -static -Os -Wall -Wextra -Werror -o pause pause.c
 *   pause -v    prints the version and exits
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define VERSION "genericdp-e2e-1"

static volatile sig_atomic_t stop_signal;

static void on_stop(int sig) { stop_signal = sig; }

/* Only wakes sigsuspend(): SIGCHLD's default action would discard it. */
static void on_child(int sig) { (void)sig; }

static int install(int sig, void (*handler)(int)) {
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sigfillset(&sa.sa_mask);
	if (sig == SIGCHLD)
		sa.sa_flags = SA_NOCLDSTOP;
	return sigaction(sig, &sa, NULL);
}

static void reap(void) {
	for (;;) {
		pid_t pid = waitpid(-1, NULL, WNOHANG);
		if (pid > 0)
			continue;
		if (pid < 0 && errno == EINTR)
			continue;
		return; /* 0: children left, none exited; ECHILD: none left */
	}
}

int main(int argc, char **argv) {
	if (argc == 2 && strcmp(argv[1], "-v") == 0) {
		printf("pause %s\n", VERSION);
		return 0;
	}
	if (argc != 1) {
		fprintf(stderr, "usage: pause [-v]\n");
		return 2;
	}
	sigset_t blocked, waiting;
	sigfillset(&blocked);
	if (sigprocmask(SIG_SETMASK, &blocked, NULL) != 0 || install(SIGINT, on_stop) != 0 ||
	    install(SIGTERM, on_stop) != 0 || install(SIGCHLD, on_child) != 0) {
		perror("pause: signal setup");
		return 1;
	}
	waiting = blocked;
	sigdelset(&waiting, SIGINT);
	sigdelset(&waiting, SIGTERM);
	sigdelset(&waiting, SIGCHLD);
	/* After the setup: the line also says the signals are in place. */
	fprintf(stderr, "pause: waiting for SIGINT or SIGTERM%s\n",
	        getpid() == 1 ? "" : " (not PID 1: orphans are not re-parented here)");

	while (!stop_signal) {
		sigsuspend(&waiting); /* returns after a handler ran, mask restored */
		reap();
	}
	fprintf(stderr, "pause: %s, exiting\n", strsignal(stop_signal));
	return 0;
}
