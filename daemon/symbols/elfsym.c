/* elfsym.c - the function symbols of an ELF file and their file offsets, for uprobes. */
#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "symbols/elf_util.h"
#include "symbols/elfsym.h"
#include "util.h"


/* The file offset of virtual address @addr, through the PT_LOAD headers; 0 if none holds it. */
static uint64_t vaddr_to_offset(Elf *elf, uint64_t addr)
{
	size_t nph;

	if (elf_getphdrnum(elf, &nph) < 0)
		return 0;
	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD || !(ph.p_flags & PF_X))
			continue;
		if (addr >= ph.p_vaddr && addr < ph.p_vaddr + ph.p_filesz)
			return addr - ph.p_vaddr + ph.p_offset;
	}
	return 0;
}

/*
 * elfsym__scan() - append to @out every defined function symbol of the file
 * open at @fd (.dynsym and .symtab, in section order; local symbols
 * included: a static CUDA runtime's and NVTX v3's are local) for which
 * @keep says yes, deduplicated by (name, offset). Version suffixes
 * ("@@...") are cut. Returns 0 or -errno (-EINVAL: not an ELF file;
 * -ENOMEM, @out then holds what was found before). Reads @fd (mmap); does
 * not log.
 */
int elfsym__scan(int fd, bool (*keep)(const char *name, void *ctx), void *ctx,
		 struct elf_sym_list *out)
{
	_cleanup_(elf_endp) Elf *elf = NULL;
	Elf_Scn *scn = NULL;

	elf_version(EV_CURRENT);
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF)
		return -EINVAL;
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *data;
		size_t n;

		if (!gelf_getshdr(scn, &sh) ||
		    (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM) || sh.sh_entsize == 0)
			continue;
		data = elf_getdata(scn, NULL);
		if (!data)
			continue;
		n = sh.sh_size / sh.sh_entsize;
		for (size_t i = 0; i < n; i++) {
			GElf_Sym sym;
			const char *name;
			char buf[128];
			uint64_t off;
			bool dup = false;

			if (!gelf_getsym(data, (int)i, &sym) ||
			    GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx == SHN_UNDEF ||
			    sym.st_value == 0)
				continue;
			name = elf_strptr(elf, sh.sh_link, sym.st_name);
			if (!name || !*name)
				continue;
			snprintf(buf, sizeof(buf), "%s", name);
			buf[strcspn(buf, "@")] = '\0';
			if (!keep(buf, ctx))
				continue;
			off = vaddr_to_offset(elf, sym.st_value);
			if (!off)
				continue;
			for (size_t k = 0; k < out->n && !dup; k++)
				dup = out->v[k].offset == off && strcmp(out->v[k].name, buf) == 0;
			if (dup)
				continue;
			if (grow_array((void **)&out->v, &out->cap, out->n, sizeof(*out->v)) < 0)
				return -ENOMEM;
			snprintf(out->v[out->n].name, sizeof(out->v[out->n].name), "%s", buf);
			out->v[out->n++].offset = off;
		}
	}
	return 0;
}


/*
 * elfsym__has_usdt_provider() - whether the ELF file open at @fd has SystemTap
 * SDT notes (section .note.stapsdt, the format of <sys/sdt.h>: each note's
 * description holds the probe's address, base and semaphore, then the provider
 * and probe names) naming @provider. Returns 1, 0, or -EINVAL if @fd is not
 * an ELF file. Reads the section headers and that one section; does not log.
 */
int elfsym__has_usdt_provider(int fd, const char *provider)
{
	_cleanup_(elf_endp) Elf *elf = NULL;
	Elf_Scn *scn = NULL;
	size_t shstrndx, plen = strlen(provider);

	elf_version(EV_CURRENT);
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF || elf_getshdrstrndx(elf, &shstrndx) != 0)
		return -EINVAL;
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		const char *name;
		Elf_Data *data;
		size_t off = 0, name_off, desc_off;
		GElf_Nhdr nh;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE)
			continue;
		name = elf_strptr(elf, shstrndx, sh.sh_name);
		if (!name || strcmp(name, ".note.stapsdt") != 0)
			continue;
		data = elf_getdata(scn, NULL);
		while (data && (off = gelf_getnote(data, off, &nh, &name_off, &desc_off)) > 0) {
			const char *desc = (const char *)data->d_buf + desc_off;
			/* Three addresses of the file's class, then "provider\0name\0args\0". */
			size_t addrs = 3 * (gelf_getclass(elf) == ELFCLASS32 ? 4 : 8);

			if (nh.n_type == 3 && nh.n_descsz > addrs + plen &&
			    memcmp(desc + addrs, provider, plen) == 0 && desc[addrs + plen] == '\0')
				return 1;
		}
	}
	return 0;
}
