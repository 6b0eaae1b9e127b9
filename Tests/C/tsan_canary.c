/* A deliberate data race: `make test-c-tsan` runs it first and requires
 * ThreadSanitizer to report it, so that a sanitizer that is not really on
 * cannot pass the C thread tests silently. */
#include <pthread.h>
#include <stdio.h>

static int shared;

static void *bump(void *arg) {
  (void)arg;
  for (int i = 0; i < 1000; i++) shared++;
  return NULL;
}

int main(void) {
  pthread_t a, b;
  pthread_create(&a, NULL, bump, NULL);
  pthread_create(&b, NULL, bump, NULL);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  printf("%d\n", shared);
  return 0;
}
