/* py-embed.c - python3 built on the shared libpython: Py_BytesMain(), nothing else. */
#include <Python.h>

int main(int argc, char **argv)
{
	return Py_BytesMain(argc, argv);
}
