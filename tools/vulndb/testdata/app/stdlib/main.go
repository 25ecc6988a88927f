// Command stdlib calls the two standard-library symbols that the fixture
// entries name: one fixed in no Go release yet, one fixed long ago.
package main

import "strings"

func main() { println(strings.ToUpper("a"), strings.ToLower("B")) }
