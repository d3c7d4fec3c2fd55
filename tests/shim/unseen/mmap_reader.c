/* Reads a file through mmap: the page cache is read by loads, never by a read call. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct stat st;
	unsigned long sum = 0;
	int fd = argc == 2 ? open(argv[1], O_RDONLY) : -1;
	unsigned char *p;

	if (fd < 0 || fstat(fd, &st) < 0)
		return 2;
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED)
		return 2;
	for (off_t i = 0; i < st.st_size; i++)
		sum += p[i];
	printf("%lu\n", sum);
	return 0;
}
