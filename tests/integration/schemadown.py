"""schemadown.py - turn a profd database back into what a profd of an older
schema left, generically, for the tests and benchmarks of migrations.

The reference shape of schema N is what schema/0001..N *.sql (the files the
store embeds) build in an empty database. downgrade() makes a real database
match it without knowing what the later migrations did: it drops the tables,
indexes, views and triggers the reference lacks, drops the columns its tables
lack (rebuilding a table where DROP COLUMN cannot), recreates the
reference's objects that are missing or differ, and sets user_version. So it
keeps working as migrations are added, and the caller can prove the result
with shape(): sqlite_master equal to the reference's.

It lives beside profdtest.py, not in bench/, because both
tests/integration/test-migrate.py and bench/query import it (bench/query
puts this folder on sys.path), and the integration suite is where the copy
that must not be wrong is tested. Needs SQLite >= 3.35 (DROP COLUMN).
"""
import os
import re
import sqlite3

_MIGRATION = re.compile(r'(\d{4})-.*\.sql')


def migration_files(schema_dir, version):
    """The paths of @schema_dir's migrations 1..@version, in order. Raises
    ValueError if one of them is missing (the numbering has a gap)."""
    found = {}
    for name in os.listdir(schema_dir):
        m = _MIGRATION.fullmatch(name)
        if m and int(m.group(1)) <= version:
            found[int(m.group(1))] = os.path.join(schema_dir, name)
    if sorted(found) != list(range(1, version + 1)):
        raise ValueError('%s: migrations 1..%d not all there (have %r)' % (schema_dir, version, sorted(found)))
    return [found[v] for v in sorted(found)]


def reference(schema_dir, version):
    """An in-memory database built by migrations 1..@version of @schema_dir, as
    the store applies them to an empty database. The caller closes it."""
    ref = sqlite3.connect(':memory:')
    for path in migration_files(schema_dir, version):
        with open(path) as f:
            ref.executescript(f.read())
    ref.execute('PRAGMA user_version = %d' % version)
    return ref


def _norm(sql):
    """@sql with runs of white space made one space: SQLite keeps a CREATE's
    text as written, and ALTER TABLE edits it in place."""
    return None if sql is None else ' '.join(sql.split())


def shape(conn):
    """The schema of @conn, comparable between databases: the sorted
    (type, name, table, SQL with white space normalized) of every object in
    sqlite_master (automatic indexes too, whose SQL is None), and
    ('user_version', N)."""
    rows = [(t, n, tbl, _norm(sql)) for t, n, tbl, sql in
            conn.execute('SELECT type, name, tbl_name, sql FROM sqlite_master')]
    rows.append(('user_version', str(conn.execute('PRAGMA user_version').fetchone()[0]), '', ''))
    return sorted(rows, key=lambda r: tuple('' if x is None else x for x in r))


def _objects(conn):
    """{(type, name): (table, SQL)} of @conn, in creation order (rowid)."""
    return {(t, n): (tbl, sql) for t, n, tbl, sql in
            conn.execute('SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY rowid')}


def _columns(conn, table):
    return [r[1] for r in conn.execute('PRAGMA table_info("%s")' % table)]


def _quote(name):
    return '"%s"' % name.replace('"', '""')


def downgrade(db, schema_dir, version):
    """Make the database file @db what a profd at schema @version left: the
    reference() shape, the rows of every table and column it shares with the
    reference kept (the rows of what it lacks are lost, as that profd never
    wrote them; a table that became a view gets the view's rows back),
    PRAGMA user_version = @version. One transaction: on an error
    (sqlite3.Error, ValueError) @db is left as it was. Returns the list of
    changes made, as short strings ("drop table vm_changes", ...)."""
    ref = reference(schema_dir, version)
    want = _objects(ref)
    done = []
    c = sqlite3.connect(db, isolation_level=None)
    try:
        # Off for the rebuild of a table (its rows are copied, not checked);
        # legacy renames so that renaming a table to rebuild it does not
        # rewrite other objects' references to it.
        c.execute('PRAGMA foreign_keys = OFF')
        c.execute('PRAGMA legacy_alter_table = ON')
        c.execute('BEGIN IMMEDIATE')

        def run(sql, what):
            c.execute(sql)
            done.append(what)

        have = _objects(c)
        # A table a later migration made a view of the same name and columns
        # (stack_frames, schema 20): its rows, read through the view while
        # what it reads is whole, go back into the table once it exists.
        kept = []
        for (t, n) in have:
            if t == 'view' and ('table', n) in want:
                tmp = '_schemadown_rows_' + n
                run('CREATE TEMP TABLE %s AS SELECT * FROM %s' % (_quote(tmp), _quote(n)),
                    'keep the rows of view %s' % n)
                kept.append((n, tmp))
        # Views and triggers hold no rows: those not in the reference, or not
        # as it has them, go (a view or trigger that names a column stops DROP
        # COLUMN); the reference's are created again below.
        for (t, n), (_, sql) in have.items():
            if t in ('view', 'trigger') and _norm(want.get((t, n), (None, None))[1]) != _norm(sql):
                run('DROP %s %s' % (t.upper(), _quote(n)), 'drop %s %s' % (t, n))
        # Indexes the reference lacks or defines otherwise (automatic ones,
        # without SQL, come and go with their tables' constraints).
        for (t, n), (_, sql) in have.items():
            if t == 'index' and sql is not None and _norm(want.get((t, n), (None, None))[1]) != _norm(sql):
                run('DROP INDEX %s' % _quote(n), 'drop index %s' % n)
        for (t, n), (_, sql) in have.items():
            if t != 'table' or n == 'sqlite_sequence':
                continue
            if (t, n) not in want:
                run('DROP TABLE %s' % _quote(n), 'drop table %s' % n)
                continue
            ref_sql = want[(t, n)][1]
            if _norm(sql) == _norm(ref_sql):
                continue
            ref_cols = _columns(ref, n)
            try:
                for col in _columns(c, n):
                    if col not in ref_cols:
                        run('ALTER TABLE %s DROP COLUMN %s' % (_quote(n), _quote(col)),
                            'drop column %s.%s' % (n, col))
            except sqlite3.OperationalError:
                pass  # a key or constrained column: rebuilt below
            now = c.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (n,)).fetchone()[0]
            if _norm(now) != _norm(ref_sql):
                _rebuild(c, n, ref_sql, ref_cols)
                done.append('rebuild table %s' % n)
        # What the reference has and the database now lacks, in the
        # reference's order (tables before the indexes, views and triggers
        # that name them).
        have = _objects(c)
        for (t, n), (_, sql) in want.items():
            if (t, n) not in have and sql is not None:
                run(sql, 'create %s %s' % (t, n))
        for n, tmp in kept:
            cols = ', '.join(_quote(col) for col in _columns(c, tmp) if col in _columns(ref, n))
            run('INSERT INTO %s (%s) SELECT %s FROM temp.%s' % (_quote(n), cols, cols, _quote(tmp)),
                'rows of table %s' % n)
            c.execute('DROP TABLE temp.%s' % _quote(tmp))
        run('PRAGMA user_version = %d' % version, 'user_version %d' % version)
        c.execute('COMMIT')
    except BaseException:
        if c.in_transaction:
            c.execute('ROLLBACK')
        raise
    finally:
        c.close()
        ref.close()
    return done


def _rebuild(c, name, ref_sql, ref_cols):
    """Replace table @name of @c by one created with @ref_sql, its rows (and
    rowids, for a rowid table) copied in the columns both have. The views and
    triggers left are dropped first (created again from the reference)."""
    for t, n in c.execute("SELECT type, name FROM sqlite_master WHERE type IN ('view', 'trigger')").fetchall():
        c.execute('DROP %s %s' % (t.upper(), _quote(n)))
    old = '_schemadown_old_' + name
    c.execute('ALTER TABLE %s RENAME TO %s' % (_quote(name), _quote(old)))
    c.execute(ref_sql)
    common = [col for col in _columns(c, old) if col in ref_cols]
    cols = ', '.join(_quote(col) for col in common)
    # A rowid table keeps its rowids, unless a column is their alias (INTEGER PRIMARY KEY).
    info = c.execute('PRAGMA table_info(%s)' % _quote(name)).fetchall()
    alias = sum(r[5] > 0 for r in info) == 1 and any(r[5] > 0 and r[2].upper() == 'INTEGER' for r in info)
    rowid = '' if alias or 'WITHOUT ROWID' in _norm(ref_sql).upper() else 'rowid, '
    c.execute('INSERT INTO %s (%s%s) SELECT %s%s FROM %s' % (_quote(name), rowid, cols, rowid, cols, _quote(old)))
    c.execute('DROP TABLE %s' % _quote(old))
