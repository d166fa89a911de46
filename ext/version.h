/* version.h: the extension's version, what sentiment_version() returns
 * (functions.c); the Makefile and python/build_wheel.py read it from here.
 * Room: ext/.
 */
#ifndef EXT_VERSION_H
#define EXT_VERSION_H

#define SX_VERSION "0.1.0"

#endif
