// Fixture: `exec MODE` locks 10 times then re-executes itself as
// `exec child` through execve/execle (with an environment that lacks
// LD_PRELOAD and LOCKSCOPE_*) or execlp (inherited environment). The child
// locks 20 times, says whether the recorder's variables reached it, and
// exits with 5.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;

static void pairs(int n) {
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&m);
        pthread_mutex_unlock(&m);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "child") == 0) {
        pairs(20);
        printf("child preload=%s session=%s foo=%s\n", getenv("LD_PRELOAD") ? "yes" : "no",
               getenv("LOCKSCOPE_SESSION") ? "yes" : "no", getenv("FOO") ? getenv("FOO") : "-");
        return 5;
    }
    pairs(10);
    char *env[] = {"FOO=bar", NULL};
    char *args[] = {argv[0], "child", NULL};
    fflush(stdout);
    const char *mode = argc > 1 ? argv[1] : "execve";
    // A failing exec first: it must be recorded and leave errno as ENOENT.
    execve("/nonexistent/lockscope-test", args, env);
    perror("expected failure");
    if (strcmp(mode, "execve") == 0) execve(argv[0], args, env);
    else if (strcmp(mode, "execle") == 0) execle(argv[0], argv[0], "child", (char *)0, env);
    else if (strcmp(mode, "execlp") == 0) execlp(argv[0], argv[0], "child", (char *)0);
    perror("exec");
    return 1;
}
