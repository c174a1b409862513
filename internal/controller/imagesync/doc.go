// Package imagesync is the ImageSync controller: it imports the image an ImageSync names from
// the Butler Image Factory into Harvester and reports it Ready with status.providerImageRef.
package imagesync
