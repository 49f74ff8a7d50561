/* peak_rss OUT CMD [ARGS...]: runs CMD (stdin, stdout and stderr are
 * this process's), writes its peak resident set size in KiB to the file
 * OUT, and exits with its status (128 + the signal that killed it).
 *
 * Why a helper instead of wait4 in the test itself: Linux keeps the peak
 * RSS of the memory a process had before an exec (fs/exec.c, exec_mmap),
 * and a child that std's Command spawns shares the test process's memory
 * until its exec (posix_spawn). The child then reports the test process's
 * peak whenever that is larger than its own, and the CLI tests are one
 * process in which other tests hold large traces (a report that peaks at
 * 19 MB measured 3 GB that way). Forked from this helper, the command
 * starts from well under 1 MiB. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: peak_rss OUT CMD [ARGS...]\n");
        return 2;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("peak_rss: fork");
        return 2;
    }
    if (pid == 0) {
        execvp(argv[2], argv + 2);
        perror("peak_rss: exec");
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid) {
        perror("peak_rss: wait4");
        return 2;
    }
    FILE *out = fopen(argv[1], "w");
    if (!out || fprintf(out, "%ld\n", ru.ru_maxrss) < 0 || fclose(out) != 0) {
        perror("peak_rss: write");
        return 2;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
