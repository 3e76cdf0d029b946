package registry

import (
	"bytes"
	"io"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// sharedEncoding is a run or plan that many watches send: the API server's watch handler asks
// a runtime.CacheableObject for its bytes, so every watch that sends the object the same way
// (same media type, event type and Table options) writes the bytes encoded by the first one.
// Fifty watchers of one event, or fifty watchers starting with the same initial events, cost
// one encoding, as they do in kube-apiserver's watch cache.
type sharedEncoding struct {
	object runtime.Object

	mu        sync.Mutex
	encodings map[runtime.Identifier]*encoding
}

// encoding is one serialization of a sharedEncoding's object.
type encoding struct {
	once sync.Once
	raw  []byte
	err  error
}

var _ runtime.CacheableObject = &sharedEncoding{}

// shareEncoding wraps obj so that its encodings are shared; nil stays nil.
func shareEncoding(obj runtime.Object) runtime.Object {
	switch obj.(type) {
	case nil, *sharedEncoding:
		return obj
	}
	return &sharedEncoding{object: obj}
}

// CacheEncode implements runtime.CacheableObject: the first call of an identifier encodes a
// copy of the object, since encoders may set its kind; later calls write the same bytes.
func (s *sharedEncoding) CacheEncode(id runtime.Identifier, encode func(runtime.Object, io.Writer) error, w io.Writer) error {
	s.mu.Lock()
	e, ok := s.encodings[id]
	if !ok {
		if s.encodings == nil {
			s.encodings = map[runtime.Identifier]*encoding{}
		}
		e = &encoding{}
		s.encodings[id] = e
	}
	s.mu.Unlock()
	e.once.Do(func() {
		var buf bytes.Buffer
		e.err = encode(s.object.DeepCopyObject(), &buf)
		e.raw = buf.Bytes()
	})
	if e.err != nil {
		return e.err
	}
	_, err := w.Write(e.raw)
	return err
}

// GetObject implements runtime.CacheableObject with a copy the caller owns.
func (s *sharedEncoding) GetObject() runtime.Object { return s.object.DeepCopyObject() }

// GetObjectKind implements runtime.Object.
func (s *sharedEncoding) GetObjectKind() schema.ObjectKind { return s.object.GetObjectKind() }

// DeepCopyObject implements runtime.Object; the copy shares no encodings.
func (s *sharedEncoding) DeepCopyObject() runtime.Object {
	return &sharedEncoding{object: s.object.DeepCopyObject()}
}
