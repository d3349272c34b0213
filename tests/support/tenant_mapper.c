/* What a hostile tenant does with the files it maps, for the tenant tests
 * (tests/integration/tenant_test.cpp); built by the test with cc.
 *
 *   tenant_mapper swap LIB REPLACEMENT READY   map LIB executable; at the first
 *       open of LIB by anyone else, map REPLACEMENT over it (MAP_FIXED); wait
 *   tenant_mapper truncate LIB READY           map LIB executable; at the first
 *       open of LIB by anyone else, truncate it to nothing; wait
 *   tenant_mapper many READY LIB...            map each LIB executable; wait
 *   tenant_mapper dlopen SECONDS READY LIB...  dlopen each LIB, wait SECONDS, exit
 *   tenant_mapper victim FILE SECONDS REPORT   map FILE executable, compare it
 *       with the file's bytes every millisecond; REPORT says "clean" or where it
 *       changed (a breakpoint written into it)
 * "Wait" is until killed. READY is created once the files are mapped. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void ready(const char* path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) close(fd);
}

static void* map_exec(const char* path, void* at, size_t* len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) { perror(path); exit(2); }
  struct stat st;
  fstat(fd, &st);
  *len = (size_t)st.st_size;
  void* p = mmap(at, *len, PROT_READ | PROT_EXEC, MAP_PRIVATE | (at ? MAP_FIXED : 0), fd, 0);
  close(fd);
  if (p == MAP_FAILED) { perror("mmap"); exit(2); }
  return p;
}

static int swap(const char* lib, const char* replacement, const char* ready_file) {
  size_t len;
  void* at = map_exec(lib, NULL, &len);
  int in = inotify_init1(IN_CLOEXEC);
  if (in < 0 || inotify_add_watch(in, lib, IN_OPEN) < 0) { perror("inotify"); return 2; }
  ready(ready_file);
  char buf[4096];
  if (read(in, buf, sizeof buf) <= 0) { perror("read"); return 2; }
  size_t rlen;
  map_exec(replacement, at, &rlen);  /* the mapping now names the replacement */
  printf("swapped\n");
  fflush(stdout);
  for (;;) pause();
}

static int truncate_at_open(const char* lib, const char* ready_file) {
  size_t len;
  map_exec(lib, NULL, &len);
  int in = inotify_init1(IN_CLOEXEC);
  if (in < 0 || inotify_add_watch(in, lib, IN_OPEN) < 0) { perror("inotify"); return 2; }
  ready(ready_file);
  char buf[4096];
  if (read(in, buf, sizeof buf) <= 0) { perror("read"); return 2; }
  struct timespec soon = {0, 200000};
  nanosleep(&soon, NULL);  /* the agent is reading it by now */
  if (truncate(lib, 0) != 0) { perror("truncate"); return 2; }
  printf("truncated\n");
  fflush(stdout);
  for (;;) pause();
}

static int many(const char* ready_file, int n, char** libs) {
  for (int i = 0; i < n; ++i) {
    size_t len;
    map_exec(libs[i], NULL, &len);
  }
  ready(ready_file);
  for (;;) pause();
}

static int dlopen_all(int seconds, const char* ready_file, int n, char** libs) {
  for (int i = 0; i < n; ++i)
    if (!dlopen(libs[i], RTLD_NOW | RTLD_LOCAL)) { fprintf(stderr, "%s\n", dlerror()); return 2; }
  ready(ready_file);
  sleep((unsigned)seconds);
  return 0;
}

static int victim(const char* file, int seconds, const char* report) {
  size_t len;
  const unsigned char* mapped = map_exec(file, NULL, &len);
  unsigned char* disk = malloc(len);
  int fd = open(file, O_RDONLY | O_CLOEXEC);
  if (!disk || fd < 0 || pread(fd, disk, len, 0) != (ssize_t)len) { perror(file); return 2; }
  close(fd);
  struct timespec pause_1ms = {0, 1000000};
  const char* verdict = "clean";
  char where[64] = "";
  for (long i = 0; i < seconds * 1000L && !where[0]; ++i) {
    for (size_t k = 0; k < len; ++k)
      if (mapped[k] != disk[k]) {
        snprintf(where, sizeof where, "changed at 0x%zx: %02x", k, mapped[k]);
        break;
      }
    nanosleep(&pause_1ms, NULL);
  }
  FILE* out = fopen(report, "w");
  if (!out) return 2;
  fprintf(out, "%s\n", where[0] ? where : verdict);
  fclose(out);
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 5 && !strcmp(argv[1], "swap")) return swap(argv[2], argv[3], argv[4]);
  if (argc >= 4 && !strcmp(argv[1], "truncate")) return truncate_at_open(argv[2], argv[3]);
  if (argc >= 4 && !strcmp(argv[1], "many")) return many(argv[2], argc - 3, argv + 3);
  if (argc >= 5 && !strcmp(argv[1], "dlopen")) return dlopen_all(atoi(argv[2]), argv[3], argc - 4, argv + 4);
  if (argc >= 5 && !strcmp(argv[1], "victim")) return victim(argv[2], atoi(argv[3]), argv[4]);
  fprintf(stderr, "usage: see the comment at the top of tenant_mapper.c\n");
  return 2;
}
