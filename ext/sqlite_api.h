/* sqlite_api.h: SQLite's API as a loadable extension sees it (through the
 * sqlite3_api table that sentiment.c's entry point receives). Every ext/
 * header that names an SQLite type includes this one, never <sqlite3.h>.
 * Room: ext/.
 */
#ifndef EXT_SQLITE_API_H
#define EXT_SQLITE_API_H

#include <sqlite3ext.h>

SQLITE_EXTENSION_INIT3

#endif
