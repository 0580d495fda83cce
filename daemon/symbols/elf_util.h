/* elf_util.h - what the files of daemon/symbols/ that read ELF share: a cleanup helper for libelf
 * handles. */
#pragma once

#include <libelf.h>

#include "util.h"

/* _cleanup_(elf_endp) Elf *e: elf_end() when it goes out of scope (elf_end() accepts NULL). */
DEFINE_TRIVIAL_CLEANUP_FUNC(Elf *, elf_end)
